"""Scenario inputs checked before any load: a dataset, a JSON schema or a tokenizer that cannot be read is a
one-line usage error (exit 2) before a worker starts, and a burst run without an end gets one from its shape."""

from __future__ import annotations

from vllm_users.options import Options, changed


def prepare(o: Options, scenario_names: list[str]) -> Options:
    """Scenario defaults and input checks before any load; a UsageError (DatasetError, SchemaError,
    TokenizerError) on bad input."""
    if "burst" in scenario_names and o.load.num_prompts is None and o.load.run_time is None:
        from vllm_users.scenarios.burst import plan_from_options

        # the shape ends the run
        o = changed(o, run_time=plan_from_options(o.burst, o.load.users).total_s + 5)
    if o.prompt.dataset:
        from vllm_users.workload.datasets import load_dataset

        load_dataset(o.prompt.dataset, o.prompt.dataset_format)
    if o.json.json_schema:
        from vllm_users.workload.schemas import load_schema_file

        load_schema_file(o.json.json_schema)
    if o.prompt.tokenizer:
        from vllm_users.workload.source import load_tokenizer

        load_tokenizer(o.prompt.tokenizer)
    return o
