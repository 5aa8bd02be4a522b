"""The step runner that `vllm-locust run` and its multi-run modes (--repeats, --sweep, --find-max-rate,
`sweep-server`) share. Each of these is decided here once:
- the embedded simulator's command line (`simulator_args`), for one run and for the server shared by every step;
- the directory of a run and of a multi-run (vllm_users.run_dir names them), and each step's;
- each step's options and seed (`StepRunner.step`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestration.settings import config as C
from vllm_users import run_dir as R
from vllm_users.atomic import atomic_json
from vllm_users.measure import metric_keys as K
from vllm_users.measure.delivered import shortfall_text
from vllm_users.measure.run_result import load_result
from vllm_users.options import Options, changed, env_api_key
from vllm_users.run_options import OutputOptions
from vllm_users.workload.prompt_options import RequestOptions

if TYPE_CHECKING:
    from vllm_sim.launch import SimProcess

__all__ = [
    "CONSOLE",
    "REPEAT_STEPS",
    "REPEAT_STRIDE",
    "SEARCH_STEPS",
    "SERVER_POINTS",
    "STEP_FIELDS",
    "STEP_STRIDE",
    "SWEEP_STEPS",
    "RunOne",
    "Step",
    "StepKind",
    "StepRunner",
    "check_twin",
    "embedded_simulator",
    "read_step",
    "shared_host",
    "simulator_args",
    "step_seed",
    "summarize_step",
    "with_delivery",
    "with_twin",
    "write_output_file",
]


CONSOLE = "console.txt"  # what a step of a sweep or a search prints (its progress and full summary), in its directory
RunOne = Callable[..., int]  # commands.run.run: one run of these options (a step's `watch` may stop it early)


# Settings that a step takes over from the parent and must not inherit (the parent's own job).
# --repeats is not among them: a sweep or search step with --repeats N is itself repeated.
_PARENT_ONLY = {"sweep": "", "find_max_rate": False, "concurrency_sweep": "", "output_file": ""}


# ------------------------------------------------------------------------------------- the embedded simulator
def check_twin(path: str, host: str) -> None:
    """--twin is for the embedded simulator (no --host), and its profile must be readable: UsageError otherwise."""
    from vllm_sim.twin import TwinError, read_twin

    if host:
        raise C.UsageError("--twin starts the embedded simulator with a profile: leave out --host")
    try:
        read_twin(path)
    except TwinError as e:
        raise C.UsageError(str(e)) from None


def with_twin(a: Options) -> Options:
    """--twin (checked) folded into --sim-args, first, so that --sim-args beside it still win (what-if planning):
    the simulator of one run, or the one a multi-run's steps share, reads it from there."""
    if not a.simulator.twin or a.server.host:
        return a
    check_twin(a.simulator.twin, a.server.host)
    return changed(a, twin="", sim_args=f"--twin {a.simulator.twin} {a.simulator.sim_args}".strip())


def simulator_args(a: Options) -> list[str]:
    """The embedded simulator's flags: --sim-args, and the run's API key (--api-key or the environment's), which
    it then requires of every request, unless --sim-args names a key of its own."""
    args = a.simulator.sim_args.split() if a.simulator.sim_args else []
    api_key = a.server.api_key or env_api_key()
    if api_key and "--api-key" not in args:
        args += ["--api-key", api_key]
    return args


@contextmanager
def embedded_simulator(a: Options) -> Iterator[SimProcess]:
    """The embedded simulator for `a` (a run without --host), stopped on the way out."""
    from vllm_sim.launch import start_simulator

    sim = start_simulator(simulator_args(a))
    try:
        yield sim
    finally:
        sim.stop()


@contextmanager
def shared_host(a: Options) -> Iterator[str]:
    """The server every step talks to: --host, or one embedded simulator started for all steps."""
    if a.server.host:
        yield a.server.host
        return
    with embedded_simulator(a) as sim:
        yield sim.url


# ------------------------------------------------------------------------------------- directories
def _parent_dir(a: OutputOptions, kind: str, marker: str) -> str:
    """The directory holding every step (created); UsageError when it already holds `marker`."""
    path = R.named_dir(a.output_dir, a.run_name, kind)
    if os.path.exists(os.path.join(path, marker)):
        raise C.UsageError(f"{path} already holds a {kind}; choose another --run-name")
    os.makedirs(path, exist_ok=True)
    return path


# ------------------------------------------------------------------------------------- a step's options and seed
REPEAT_STRIDE, STEP_STRIDE = (
    1,
    1000,
)  # a sweep's step k may itself be repeated: its repeats take k*1000 + 0, 1, ...


def step_seed(a: RequestOptions, k: int, stride: int = STEP_STRIDE) -> int:
    """The --seed of the k-th step (k = 0, 1, ...) of a search or sweep (stride STEP_STRIDE), or of the k-th
    repeat (stride REPEAT_STRIDE), against one server.

    Each step draws its own prompts (and arrivals): with the parent's seed every step would resend the first
    step's prompts, and a server with prefix caching (vLLM's default) would answer the later steps from its
    cache (the second of two repeats hit 95 % of its prompt tokens; its TTFT read 16 ms against 41 ms). The
    seeds are fixed offsets, so a search or a sweep is as reproducible as one run. `sweep-server` keeps the
    parent's seed (stride 0): each configuration is a fresh server, and the same prompts make the
    configurations paired."""
    return int(a.seed) + k * stride


def _step_args(a: Options, host: str, out_dir: str, name: str, **overrides: Any) -> Options:
    """A copy of `a` for one step: its own run directory, the shared host, `overrides` applied."""
    return changed(
        a,
        **{
            **_PARENT_ONLY,
            "host": host,
            "output_dir": out_dir,
            "run_name": name,
            "no_report": True,
            **overrides,
        },
    )


@dataclass(frozen=True)
class StepKind:
    """How a multi-run names its directory (without --run-name) and its steps', and how it seeds its steps."""

    label: str  # the directory's label: STAMP-label
    marker: str  # its summary file (a directory that holds one is taken)
    stride: int  # step k's seed: --seed + k * stride
    name: Callable[[int, str], str]  # (step number from 1, what it runs) -> its directory's name


SWEEP_STEPS = StepKind("sweep", R.SWEEP, STEP_STRIDE, R.step_name)
SEARCH_STEPS = StepKind("search", R.SWEEP, STEP_STRIDE, R.step_name)
REPEAT_STEPS = StepKind("repeats", R.REPEATS, REPEAT_STRIDE, lambda number, _what: R.repeat_name(number))
SERVER_POINTS = StepKind("server-sweep", R.SWEEP, 0, R.point_name)


@dataclass(frozen=True)
class Step:
    """One step that ran: its options (its directory is `options.outputs.output_dir/options.outputs.run_name`) and exit code."""

    options: Options
    code: int

    @property
    def name(self) -> str:
        """The step's directory name."""
        return self.options.outputs.run_name

    @property
    def run_dir(self) -> str:
        """The step's run directory."""
        return os.path.join(self.options.outputs.output_dir, self.options.outputs.run_name)


class StepRunner:
    """One multi-run: its directory (made here), and each step run there with its own name, seed and options."""

    def __init__(self, a: Options, run_one: RunOne, kind: StepKind) -> None:
        self.a, self.run_one, self.kind = a, run_one, kind
        self.base = _parent_dir(a.outputs, kind.label, kind.marker)

    def path(self, name: str) -> str:
        """The run directory of the step called `name`."""
        return os.path.join(self.base, name)

    def options(self, host: str, number: int, what: str = "", **overrides: Any) -> Options:
        """Step `number`'s (from 1) options: the parent's, against `host`, in its own directory, with its seed."""
        seed = step_seed(self.a.request, number - 1, self.kind.stride)
        return _step_args(
            self.a, host, self.base, self.kind.name(number, what), **{"seed": seed, **overrides}
        )

    def step(
        self, host: str, number: int, what: str = "", watch: Any = None, console: str = "", **overrides: Any
    ) -> Step:
        """Run step `number` (from 1) of `what` against `host`; `watch` may stop it early (the search's);
        `console`: a file in the step's directory that gets what the step prints (its progress and summary)
        instead of the terminal (errors still go to stderr)."""
        b = self.options(host, number, what, **overrides)
        if not console:
            return Step(b, self.run_one(b) if watch is None else self.run_one(b, watch=watch))
        run_dir = os.path.join(b.outputs.output_dir, b.outputs.run_name)
        os.makedirs(run_dir, exist_ok=True)
        with open(os.path.join(run_dir, console), "w") as fh, redirect_stdout(fh):
            return Step(b, self.run_one(b) if watch is None else self.run_one(b, watch=watch))


# ------------------------------------------------------------------------------------- what a step left
# per step: (result key, sweep.json key), declared with the metrics
STEP_FIELDS = K.STEP_FIELDS


def read_step(run_dir: str) -> dict[str, Any]:
    """A step's result: result.json, or for a repeated step the repeats' means (with their CIs under `repeats`)."""
    try:
        if os.path.exists(os.path.join(run_dir, R.REPEATS)):
            doc = R.read_json(run_dir, R.REPEATS)
            res: dict[str, Any] = {k: m["mean"] for k, m in doc["metrics"].items()}
            res["repeats"] = doc
            steady = _steady_mean(run_dir, doc.get("runs") or [])
            if steady:
                res[K.DELIVERY] = steady
            return res
    except (OSError, ValueError, KeyError):
        return {}
    written = load_result(run_dir)
    return written.to_json() if written is not None else {}


def _steady_mean(run_dir: str, repeats: list[str]) -> dict[str, Any] | None:
    """A repeated step's interior rates: each repeat's `delivery` rates averaged (None unless every repeat has
    one); not delivered when any repeat was not."""
    blocks = []
    for name in repeats:
        res = load_result(os.path.join(run_dir, name))
        d = res.to_json().get(K.DELIVERY) if res is not None else None
        if not d:
            return None
        blocks.append(d)
    if not blocks:
        return None
    out: dict[str, Any] = {
        k: sum(b[k] for b in blocks) / len(blocks)
        for k in ("achieved_rate", K.OUTPUT_THROUGHPUT, "offered_rate", "achieved_fraction")
        if all(b.get(k) is not None for b in blocks)
    }
    out["tolerance"] = blocks[0]["tolerance"]
    if "offered_rate" in out:
        out["delivered"] = all(b.get("delivered", True) for b in blocks)
    return out


def write_output_file(a: OutputOptions, doc: dict[str, Any]) -> None:
    """--output-file of a multi-run mode: its summary document (repeats.json's or sweep.json's), when asked."""
    if a.output_file:
        os.makedirs(os.path.dirname(os.path.abspath(a.output_file)), exist_ok=True)
        atomic_json(a.output_file, doc)


def summarize_step(name: str, kind: str, target: float | None, run_dir: str, code: int) -> dict[str, Any]:
    """One step's row of sweep.json: what it was asked, what it achieved, its latency percentiles."""
    res = read_step(run_dir)
    s: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "target": target,
        "run_dir": run_dir,
        "exit_code": code,
        "label": kind if target is None else f"{kind} {target:g}",
    }
    for key, out in STEP_FIELDS:
        v = res.get(key)
        s[out] = v if isinstance(v, int | float) and not isinstance(v, bool) else None
    steady = res.get(K.DELIVERY) or {}
    if steady:  # the step's rates over its steady interior (measure.delivered), never over ramp and drain
        rate = steady["achieved_rate"]
        if target and steady.get("achieved_fraction") is not None:
            # the target times the fraction the server kept up with: the schedule's own draw (a 100-request
            # step's interior offered 7.9 req/s at rate 10) is the client's luck, not the server's rate, so a
            # step that held is priced at its headline rate
            rate = float(target) * min(1.0, steady["achieved_fraction"])
        s["achieved_rate"] = rate
        s[K.OUTPUT_THROUGHPUT] = steady[K.OUTPUT_THROUGHPUT] / steady["achieved_rate"] * rate
        s["offered_rate"] = steady.get("offered_rate")
        s["not_delivered"] = shortfall_text(steady)  # None: delivered (or a closed loop)
    tpot = s.get("tpot_p50_ms")
    s["output_tok_per_s_per_user"] = 1000.0 / tpot if tpot else None  # a user's stream speed (median TPOT)
    # kept for the concurrency sweep's readers (moe preset)
    s[K.TTFT.key("median")], s[K.TPOT.key("median")] = s[K.TTFT.step(50)], s[K.TPOT.step(50)]
    s[K.REQUEST_THROUGHPUT] = s["achieved_rate"]
    if res.get("repeats"):
        s["repeats"] = {
            k: {x: m[x] for x in ("ci_low", "ci_high", "n")}
            for k, m in res["repeats"].get("metrics", {}).items()
            if k in dict(STEP_FIELDS)
        }
    return s


def with_delivery(s: dict[str, Any], verdict: dict[str, Any]) -> dict[str, Any]:
    """A step's verdict (search.judge's) with the load it was given: an open-loop step whose achieved rate fell
    short of its offered rate (summarize_step's `not_delivered`) fails as "not delivered", whatever its
    latencies (they are those of a lighter load than the one asked for)."""
    why = s.get("not_delivered")
    if not why:
        return verdict
    return {**verdict, "passed": False, "not_delivered": True, "reasons": [*verdict.get("reasons", []), why]}
