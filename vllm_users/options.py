"""The option table and the typed, frozen options object: `Options` composes the option groups each feature
declares beside its code (vllm_users.option_spec's `opt` fields), and this module walks them.

Each field of a group is one option: its name (flag `--input-len`, env `VLLM_LOCUST_INPUT_LEN`, config-file
key `input_len` or `input-len`), type, default, validation (the parser in `Spec.parse`), help, and the
scopes it belongs to (option_spec: LOCUST, RUN, WORKER, CALIBRATE). Options in both LOCUST and RUN travel from
`vllm-locust run` to its master (`locust_argv`), and from the master to its workers inside Locust's spawn
message. Every Locust process holds one `Options` (`from_namespace`). Environment switches that are not options
(read where they act) are listed in ENV_SWITCHES.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm_users import option_types as T
from vllm_users.capacity_options import CapacityOptions
from vllm_users.client.options import ServerOptions
from vllm_users.distributed.options import HandoffOptions, LoadOptions, ProcessOptions, PrometheusOptions
from vllm_users.measure.gpu_options import GpuOptions
from vllm_users.measure.options import MeasureOptions
from vllm_users.option_rules import check_across
from vllm_users.option_spec import CALIBRATE, LOCUST, RUN, WORKER, Spec
from vllm_users.run_options import (
    OutputOptions,
    PreflightOptions,
    ScrapeOptions,
    SimulatorOptions,
    SourceOptions,
)
from vllm_users.scenarios.options import (
    BurstOptions,
    JsonOptions,
    MultiTurnOptions,
    ScenarioOptions,
    ToolsOptions,
)
from vllm_users.workload.classes import ClassOptions
from vllm_users.workload.images import ImageOptions
from vllm_users.workload.prefixes import PrefixOptions
from vllm_users.workload.prompt_options import PromptOptions, RequestOptions
from vllm_users.workload.synthetic_agents import AgentOptions
from vllm_users.workload.trace_schedule import TraceOptions

__all__ = [  # the scopes and Spec stay importable from here
    "API_KEY_ENV",
    "CALIBRATE",
    "DEFAULTS",
    "ENV_SWITCHES",
    "GROUPS",
    "GROUP_OF",
    "LOCUST",
    "METRICS_HEADERS_ENV",
    "METRICS_HEADERS_MORE_ENV",
    "RUN",
    "SPECS",
    "WORKER",
    "Options",
    "Spec",
    "add_locust_options",
    "build",
    "changed",
    "coerce",
    "env_api_key",
    "env_name",
    "flag",
    "from_namespace",
    "locust_argv",
    "option_env_names",
    "table",
    "value",
]

# API keys never travel as options (Locust shows options in its UI and ships them to workers):
# they come from these environment variables on every process.
API_KEY_ENV = ("VLLM_LOCUST_API_KEY", "OPENAI_API_KEY")
ENV_PREFIX = "VLLM_LOCUST_"
# environment-only switches (not options: no flag, no config key), documented with the table in docs/options.md
ENV_SWITCHES = {
    "VLLM_LOCUST_WEB_PASSWORD": "--web-login: the one user's password (user name from VLLM_LOCUST_WEB_USER, "
    "default admin); never written",
    "VLLM_LOCUST_GC_FREEZE": "1: gc.freeze() on each worker after spawning (default off; docs/metrics.md)",
    "VLLM_LOCUST_GC_GEN0": "N: the young-generation GC threshold of each worker (default 5000; 0: Python's 700)",
    "VLLM_LOCUST_MASTER_TIMEOUT": "seconds a worker waits for a silent master before saving its records and exiting",
    "VLLM_LOCUST_WORKER_DIR": "where a worker keeps its local records (set by `vllm-locust worker`)",
    "VLLM_LOCUST_REACTOR": "0: each stream's greenlet reads its own socket (default 1: one epoll reactor per worker)",
    "VLLM_LOCUST_KERNEL_TIMESTAMPS": "0: no SO_TIMESTAMPNS receive timestamps (default 1 where Linux has them)",
    "VLLM_LOCUST_RESOLVED_MODEL": "the model id the result names when --model is empty",
    "VLLM_LOCUST_API_KEY / OPENAI_API_KEY": "the API key (never an option: Locust would show and ship it)",
    "VLLM_LOCUST_METRICS_HEADERS": "(set by `vllm-locust run` for its master) the /metrics scrape's headers as JSON; "
    "never written",
    "VLLM_LOCUST_METRICS_HEADERS_MORE": "(set by `vllm-locust run` for its master) the headers of each further "
    "--server-metrics URL, as JSON {url: headers}; never written",
}
METRICS_HEADERS_ENV = "VLLM_LOCUST_METRICS_HEADERS"
METRICS_HEADERS_MORE_ENV = "VLLM_LOCUST_METRICS_HEADERS_MORE"


def env_api_key() -> str | None:
    """The API key from the environment (API_KEY_ENV, first set wins), or None."""
    return next((os.environ[k] for k in API_KEY_ENV if os.environ.get(k)), None)


def _group(cls: type) -> Any:
    """A field of Options holding one feature's option group."""
    return field(default_factory=cls, metadata={"group": cls})


@dataclass(frozen=True)
class Options:
    """Every option of vllm-locust with its value, by feature group (`o.trace.trace_format`); built once per
    process (Locust: per test), never mutated, and checked as it is built (UsageError). The groups' order is the
    table's (docs/options.md, --help)."""

    source: SourceOptions = _group(SourceOptions)
    server: ServerOptions = _group(ServerOptions)
    scenario: ScenarioOptions = _group(ScenarioOptions)
    load: LoadOptions = _group(LoadOptions)
    trace: TraceOptions = _group(TraceOptions)
    request: RequestOptions = _group(RequestOptions)
    prompt: PromptOptions = _group(PromptOptions)
    prefix: PrefixOptions = _group(PrefixOptions)
    multiturn: MultiTurnOptions = _group(MultiTurnOptions)
    tools: ToolsOptions = _group(ToolsOptions)
    json: JsonOptions = _group(JsonOptions)
    burst: BurstOptions = _group(BurstOptions)
    agents: AgentOptions = _group(AgentOptions)
    images: ImageOptions = _group(ImageOptions)
    classes: ClassOptions = _group(ClassOptions)
    measure: MeasureOptions = _group(MeasureOptions)
    capacity: CapacityOptions = _group(CapacityOptions)
    processes: ProcessOptions = _group(ProcessOptions)
    outputs: OutputOptions = _group(OutputOptions)
    scrape: ScrapeOptions = _group(ScrapeOptions)
    gpu: GpuOptions = _group(GpuOptions)
    prometheus: PrometheusOptions = _group(PrometheusOptions)
    preflight: PreflightOptions = _group(PreflightOptions)
    simulator: SimulatorOptions = _group(SimulatorOptions)
    handoff: HandoffOptions = _group(HandoffOptions)

    def __post_init__(self) -> None:
        """Options check themselves wherever they are built (`build`, `changed`, a Locust process's
        `from_namespace`, a command's parser): the rules across groups (vllm_users.option_rules), then each
        group's own `check()`, beside its fields; the first broken rule is a UsageError of one line."""
        check_across(self)
        for f in dataclasses.fields(self):
            check = getattr(getattr(self, f.name), "check", None)
            if check is not None:
                check()

    @property
    def open_loop(self) -> bool:
        """True when arrivals follow a schedule (--request-rate or --trace given)."""
        return self.load.request_rate is not None or bool(self.trace.trace)


GROUPS: dict[str, type] = {f.name: f.metadata["group"] for f in dataclasses.fields(Options)}
# option name -> the Options field of its group (names are unique over the groups: a test says so)
GROUP_OF: dict[str, str] = {f.name: g for g, cls in GROUPS.items() for f in dataclasses.fields(cls)}


def table(scope: str | None = None) -> Iterator[tuple[str, Spec, Any]]:
    """(name, spec, default) of every option, or of those in `scope`."""
    for cls in GROUPS.values():
        for f in dataclasses.fields(cls):
            spec: Spec = f.metadata["spec"]
            if scope is None or scope in spec.scopes:
                yield f.name, spec, f.default


SPECS: dict[str, Spec] = {name: spec for name, spec, _ in table()}
DEFAULTS: dict[str, Any] = {name: default for name, _, default in table()}


def build(**values: Any) -> Options:
    """Options from option name -> value (any group's; the rest at their defaults), checked (UsageError)."""
    return changed(Options(), **values)


def changed(o: Options, **values: Any) -> Options:
    """`o` with these options (by option name, any group's) changed, checked again (UsageError)."""
    by_group: dict[str, dict[str, Any]] = {}
    for name, v in values.items():
        by_group.setdefault(GROUP_OF[name], {})[name] = v
    groups = {g: dataclasses.replace(getattr(o, g), **kw) for g, kw in by_group.items()}
    return dataclasses.replace(o, **groups)


def value(o: Options, name: str) -> Any:
    """The value of option `name` in `o`."""
    return getattr(getattr(o, GROUP_OF[name]), name)


def flag(name: str) -> str:
    """The command-line flag of option `name`: --input-len."""
    return "--" + name.rstrip("_").replace("_", "-")  # class_ (a Python keyword otherwise) is --class


def env_name(name: str) -> str:
    """The environment variable of option `name`: VLLM_LOCUST_INPUT_LEN."""
    return ENV_PREFIX + name.rstrip("_").upper()


def coerce(name: str, raw: Any) -> Any:
    """A value for option `name` from text or a config-file value; argparse.ArgumentTypeError when invalid."""
    spec = SPECS[name]
    if spec.parse is None:
        return T.switch(raw)
    if spec.repeat or spec.many:
        items = [str(x) for x in raw] if isinstance(raw, list | tuple) else [_text(raw)]
        if spec.many:
            items = [" ".join(items)]
        values = [_one(spec, x) for x in items]
        return tuple(values) if spec.repeat else values[0]
    return _one(spec, raw if isinstance(raw, str) else _text(raw))


def _text(raw: Any) -> str:
    return "inf" if raw == float("inf") else str(raw)


def _one(spec: Spec, text: str) -> Any:
    value = spec.parse(text) if spec.parse is not None else T.switch(text)
    if spec.choices is not None and value not in spec.choices:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(spec.choices)}")
    return value


def _unset(raw: Any) -> bool:
    """Locust's stand-ins for 'not given' of an option whose default is None: '', 0 (its web UI sends text)."""
    return (
        raw is None
        or (isinstance(raw, str) and raw.strip() in ("", "0", "0.0", "None"))
        or (not isinstance(raw, bool | str) and raw == 0)
    )


def _locust_type(spec: Spec, default: Any) -> Callable[[str], Any]:
    """The parser Locust gets: the table's, with 'not given' (0, '') allowed where the default is None (such an
    option's choices are checked here: Locust's web UI would show them as a list with the first one chosen)."""
    assert spec.parse is not None
    if spec.text is not None:
        return _checked_text(spec.parse)
    if default is not None:
        return spec.parse
    table_parse, choices = spec.parse, spec.choices

    def parse(text: str) -> Any:
        if _unset(text):
            return None
        value = table_parse(text)
        if choices is not None and value not in choices:  # argparse's own words, as the run parser says it
            raise argparse.ArgumentTypeError(
                f"invalid choice: {value!r} (choose from {', '.join(map(repr, choices))})"
            )
        return value

    parse.__name__ = table_parse.__name__
    return parse


def _checked_text(parse: Callable[[str], Any]) -> Callable[[str], str]:
    """A structured option's parser for Locust: it checks the text and keeps it (Locust's namespace travels
    to the workers as it is; from_namespace parses it once)."""

    def check(text: str) -> str:
        parse(text)
        return text

    check.__name__ = parse.__name__
    return check


def add_locust_options(parser: Any) -> None:
    """Register the LOCUST options on Locust's parser (init_command_line_parser listener)."""
    for name, spec, default in table(LOCUST):
        kw: dict[str, Any] = {
            "env_var": env_name(spec.locust_name or name),
            "default": spec.text(default) if spec.text is not None else default,
            "help": spec.help.replace("%", "%%"),
            "include_in_web_ui": spec.web_ui,
        }
        if spec.parse is None:
            kw["action"] = "store_true"
        else:
            kw["type"] = _locust_type(spec, default)
        if spec.choices is not None and default is not None:
            kw["choices"] = spec.choices
        parser.add_argument(flag(spec.locust_name or name), **kw)


def from_namespace(ns: Any) -> Options:
    """The typed options of a Locust process from its parsed namespace (values checked again: the web UI and
    the master's spawn message set them as text or as they come); ArgumentTypeError when one is bad, UsageError
    when they break a rule (Options checks itself)."""
    given = vars(ns) if ns is not None else {}
    values: dict[str, Any] = {}
    for name, spec, default in table(LOCUST):
        key = spec.locust_name or name
        if key not in given:
            continue
        raw = given[key]
        if default is None and _unset(raw):
            values[name] = None
        elif raw is None:
            values[name] = default
        else:
            try:
                values[name] = coerce(name, raw)
            except argparse.ArgumentTypeError as e:
                raise argparse.ArgumentTypeError(f"{flag(key)}: {e}") from None
    return build(**values)


def locust_argv(o: Options, **set_by_run: Any) -> list[str]:
    """Our options as a Locust command line: every option the run shares with Locust that is not at its default,
    and the Locust-only ones `vllm-locust run` sets (`set_by_run`: results_dir, model, extra_headers; they win)."""
    out: list[str] = []
    for name, spec, default in table(LOCUST):
        if RUN not in spec.scopes and name not in set_by_run:
            continue
        v = set_by_run[name] if name in set_by_run else value(o, name)
        if v is None or v is False or v == default:
            continue
        f = flag(spec.locust_name or name)
        out += [f] if spec.parse is None else [f, spec.text(v) if spec.text is not None else _text(v)]
    return out


def option_env_names() -> Mapping[str, str]:
    """env name -> option name, for every option."""
    return {env_name(name): name for name, _, _ in table()}
