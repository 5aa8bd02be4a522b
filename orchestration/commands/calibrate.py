"""`vllm-locust calibrate`: probe a real server within a budget, fit the simulator's constants to it, write the
twin profile (`-o twin.json`) and print the fit table. `vllm-locust sim --twin` and `run --twin` serve with it."""

from __future__ import annotations

import json
import random
import re
import sys
from collections.abc import Sequence
from typing import Any

from orchestration.commands import reported
from orchestration.server.preflight import check_server
from orchestration.settings import config as C
from orchestration.twin.ownpath import path_latency, server_step_ms
from orchestration.twin.phases import ProbePlan, new_raw
from orchestration.twin.probe import Budget, Probe
from orchestration.twin.profile import build_profile, fit_table, write_profile
from orchestration.twin.progress import PHASES, PhaseLog, describe, run_phases
from vllm_users import errors, exit_codes
from vllm_users.client import tls
from vllm_users.option_types import header
from vllm_users.options import CALIBRATE, env_api_key
from vllm_users.redact import connection_headers, header_lines, redact_url

__all__ = ["batch_sizes", "main", "parse_budget"]

PROG = "vllm-locust calibrate"


def batch_sizes(largest: int) -> tuple[int, ...]:
    """The decode phase's batches: powers of two up to `largest`, and `largest` itself."""
    sizes = [1 << k for k in range(largest.bit_length()) if 1 << k <= largest]
    return tuple(sizes if sizes[-1] == largest else [*sizes, largest])


def parse_budget(text: str) -> float:
    """'180', '180s', '3m' -> seconds (> 0); UsageError otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|min)?\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise errors.UsageError(f"--budget {text!r}: expected a duration like 180s or 3m")
    return float(m.group(1)) * (60.0 if m.group(2) in ("m", "min") else 1.0)


def _parser() -> C.OneLineParser:
    p = C.OneLineParser(prog=PROG, description="Probe a server (bounded) and fit a simulator twin of it")
    p.add_argument("--host", required=True, help="the server to probe, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", default=None, help="served model (needed when the server serves several)")
    p.add_argument("--api-key", default=None, help="API key (default: $VLLM_LOCUST_API_KEY)")
    p.add_argument(
        "--header",
        action="append",
        default=[],
        type=header,
        metavar="'NAME: VALUE'",
        help="extra request header (repeatable), e.g. a gateway's credentials; never written",
    )
    p.add_argument("--budget", default="180s", help="hard bound on the probe's time (default 180s)")
    p.add_argument(
        "-o", "--output", default="twin.json", help="the twin profile to write (default twin.json)"
    )
    p.add_argument(
        "--max-concurrency", type=int, default=16, help="largest batch the decode probe starts (16)"
    )
    p.add_argument(
        "--saturation-requests",
        type=int,
        default=64,
        help="streams started at once to find the server's limits (64)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the probe's prompts (default: a new one each run, kept in the profile: a second "
        "calibration with the first one's prompts met them in the server's prefix cache)",
    )
    p.add_argument(
        "--api-server-count",
        type=int,
        default=1,
        help="the server's API-server processes (vLLM's --api-server-count, default 1): the API-server "
        "costs are fitted per process",
    )
    C.add_options(p, CALIBRATE)  # --ca-bundle, --insecure, --client-cert, --client-key (the option table's)
    return p


def _server_info(host: str, model: str, probe: Probe) -> dict[str, Any]:
    """The served model's max_model_len (/v1/models) and the server's version (/version), where shown."""
    out: dict[str, Any] = {"host": host, "model": model, "max_model_len": None, "version": None}
    status, body = probe.get("/v1/models")
    if status == 200:
        try:
            for m in json.loads(body).get("data") or []:
                if m.get("id") == model and isinstance(m.get("max_model_len"), int):
                    out["max_model_len"] = m["max_model_len"]
        except (ValueError, AttributeError):
            pass
    status, body = probe.get("/version")
    if status == 200:
        try:
            out["version"] = json.loads(body).get("version")
        except (ValueError, AttributeError):
            pass
    return out


def _path_text(path: dict[str, Any] | None) -> str:
    """The path phase's end: what the simulator's own path adds (the fit takes it out of the server's points)."""
    if path is None:
        return "not measured (the simulator did not start)"
    parts = [f"steps of {path['step_ms']:g} ms"] if path.get("step_ms") else []
    if path.get("ttft"):
        parts.append(f"TTFT +{path['ttft']['excess_ms']:.1f} ms")
    parts += [f"TPOT +{p['excess_ms']:.2f} ms at batch {p['batch']}" for p in path.get("tpot") or []]
    return ", ".join(parts) or "no point measured"


@reported(PROG)
def main(argv: Sequence[str]) -> int:
    """`vllm-locust calibrate --host URL [-o twin.json]`: probe, fit, write, print the fit table."""
    o, a = C.parse_all(_parser(), list(argv), CALIBRATE)  # the table's options: command line > environment
    tls.configure(tls.TLSConfig.of(o.server))
    seconds = parse_budget(a.budget)
    if a.api_server_count < 1:
        raise errors.UsageError(f"--api-server-count {a.api_server_count}: expected 1 or more")
    if a.max_concurrency < 1 or a.saturation_requests < 2:
        raise errors.UsageError("--max-concurrency must be >= 1 and --saturation-requests >= 2")
    if not a.host.startswith(("http://", "https://")):
        raise errors.UsageError(f"--host {redact_url(a.host)!r}: expected a URL like http://127.0.0.1:8000")
    api_key = a.api_key or env_api_key()
    budget = Budget(seconds)
    # http://user:pass@...: Basic auth (below the key and --header), and a URL without it everywhere after this
    host, headers = connection_headers(a.host, header_lines(a.header), api_key)
    info = check_server(
        host, a.model, None, "completions", headers=headers
    )  # PreflightError: exit 3, nothing probed
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(2**31)
    probe = Probe(host, info.model, budget, None, seed, extra_headers=headers)
    server = _server_info(host, info.model, probe)
    plan = ProbePlan(
        concurrencies=batch_sizes(a.max_concurrency),
        saturation_requests=a.saturation_requests,
    ).capped(server["max_model_len"])
    raw = new_raw()
    raw["api_processes"] = a.api_server_count
    stopped = None
    # one line as each phase starts and ends (stderr, beside the fit table on stdout): a probe of minutes shows
    # where it is and what it has measured
    log = PhaseLog(lambda line: print(f"{PROG}: {line}", file=sys.stderr, flush=True), 1 + len(PHASES))
    try:
        with log.phase("path", describe("path", plan), lambda: _path_text(raw["path_latency"])):
            raw["path_latency"] = path_latency(budget.left(), step_ms=server_step_ms(probe))
        run_phases(probe, plan, raw, log)
    except KeyboardInterrupt:
        stopped = "interrupted"
    if stopped is None and budget.left() <= 0 and len(raw["phases_done"]) < 5:
        stopped = "budget spent"
    if not raw["ttft"] and not raw["tpot"]:
        if stopped == "interrupted":
            print(f"{PROG}: interrupted before any point was measured: nothing written", file=sys.stderr)
            return exit_codes.INTERRUPTED
        why = raw.get("first_error") or stopped or "no request completed"
        raise errors.PreflightError(f"{host} failed the probe: {why}")
    meta = {
        "budget_s": seconds,
        "elapsed_s": round(budget.elapsed(), 3),
        "requests": probe.requests,
        "cut": probe.cut,
        "partial": stopped is not None,
        "stopped": stopped,
        "errors": raw["errors"],
        "phases": raw["phases_done"],
        "rounds": raw.get("rounds", 0),
        "seed": seed,
    }
    doc = build_profile(raw, server, meta, plan)
    write_profile(a.output, doc)
    print(fit_table(doc), flush=True)
    print(
        f"wrote {a.output}: serve it with `vllm-locust sim --twin {a.output}` or `vllm-locust run --twin "
        f"{a.output} ...`",
        flush=True,
    )
    return exit_codes.INTERRUPTED if stopped == "interrupted" else exit_codes.OK
