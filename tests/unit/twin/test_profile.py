"""The twin profile: what calibrate writes is what the simulator reads; a bad profile is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestration.twin.phases import ProbePlan
from orchestration.twin.profile import build_profile, fit_table, write_profile
from tests.unit.twin.test_fit import _raw
from vllm_sim.config import parse_config
from vllm_sim.twin import TwinError, load_twin, read_twin

META: dict[str, Any] = {
    "budget_s": 180.0,
    "elapsed_s": 42.0,
    "requests": 99,
    "cut": 0,
    "partial": False,
    "stopped": None,
    "errors": {},
    "phases": ["warmup", "ttft", "tpot", "saturation", "prefix"],
}


def _doc() -> dict:
    return build_profile(
        _raw(), {"host": "http://h:1", "model": "m1", "max_model_len": 6000}, META, ProbePlan()
    )


def test_the_profile_round_trips_into_a_sim_config(tmp_path: Path) -> None:
    path = tmp_path / "twin.json"
    write_profile(str(path), _doc())
    cfg = parse_config(["--twin", str(path)])
    assert (cfg.decode_step_ms, cfg.decode_per_seq_ms, cfg.request_overhead_ms) == pytest.approx(
        (20.0, 1.0, 10.0)
    )
    assert cfg.prefill_tokens_per_s == pytest.approx(5000.0) and cfg.max_num_seqs == 12
    assert cfg.kv_cache_tokens == 20000 and cfg.max_model_len == 6000 and cfg.model == "m1"
    # what-if: a flag beside --twin wins, before or after it
    assert parse_config(["--max-num-seqs", "64", "--twin", str(path)]).max_num_seqs == 64
    assert parse_config(["--twin", str(path), "--kv-cache-tokens", "4096"]).kv_cache_tokens == 4096


def test_the_fit_table_shows_constants_and_errors() -> None:
    text = fit_table(_doc())
    assert (
        "prefill_tokens_per_s" in text and "5000" in text and "TTFT points" in text and "mean |error|" in text
    )
    assert "prefill_per_ctx_token_ns" in text and "default ns/token²" in text  # _raw's TTFT: a line


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(version=2), "version 2; this build reads version 1"),
        (lambda d: d["constants"].pop("decode_step_ms"), "missing field constants.decode_step_ms.value"),
        (
            lambda d: d["constants"]["max_num_seqs"].update(value="x"),
            "constants.max_num_seqs.value must be a int",
        ),
        (lambda d: d.pop("kind"), "not a twin profile"),
        (
            lambda d: d["constants"]["prefill_per_ctx_token_ns"].update(value=-1.0),
            "constants.prefill_per_ctx_token_ns.value must be >= 0, got -1.0",
        ),
    ],
)
def test_a_bad_profile_is_one_line_and_exit_2(tmp_path: Path, edit, message: str) -> None:  # type: ignore[no-untyped-def]
    doc = _doc()
    edit(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TwinError, match=message.replace(".", r"\.")):
        read_twin(str(path))
    done = subprocess.run(
        [sys.executable, "-m", "vllm_sim", "--twin", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and message in done.stderr


def test_an_unreadable_profile(tmp_path: Path) -> None:
    with pytest.raises(TwinError, match="No such file"):
        load_twin(str(tmp_path / "none.json"))
    (tmp_path / "x.json").write_text("{")
    with pytest.raises(TwinError, match="not JSON"):
        load_twin(str(tmp_path / "x.json"))


def test_the_fit_table_flags_a_constant_as_uncertain_as_its_value() -> None:
    doc = _doc()
    assert "not resolved" not in fit_table(doc)
    doc["constants"]["decode_per_seq_ms"].update(value=0.079, uncertainty=0.088)
    line = next(x for x in fit_table(doc).splitlines() if x.startswith("not resolved"))
    assert "decode_per_seq_ms 0.079 ± 0.088" in line and "--max-concurrency" in line
