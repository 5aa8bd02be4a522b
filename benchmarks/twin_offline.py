"""The twin against a recorded server, offline: `python -m benchmarks.twin_offline CORPUS_DIR [--json OUT]`.

CORPUS_DIR is one recording of a server (docs/twin.md, "Check a twin offline"; the H100 corpus's tarballs unpack
to one): `twin.json` (calibrate's profile with every probe point), `twin_server.server.json` (the three loads
of benchmarks/bench_twin_server.py, each sent to the server twice) and `server-K/` (find-max-rate round K:
search.json and one run directory per step with its records.cols). The check refits the twin from the probe's
points (orchestration.twin.fit, as calibrate fits), replays every load and every step through it in virtual time
(orchestration/twin/replay.py), and prints the error table the device would give: per load, the median TTFT,
TPOT and output tok/s against the server's two runs' mean; per step, the twin's verdict on the step's own
arrivals against the server's; and the twin's own search answer against the rounds' mean. Errors are signed
fractions, twin / server - 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Any

from benchmarks.bench_twin_server import KEYS, gpu_loads
from benchmarks.common import print_table
from benchmarks.twin_offline_range import answer_range, unresolved
from benchmarks.twin_offline_steps import finite, median_prompt, recorded_steps, replay_step, twin_search
from orchestration.twin.check import Load, compare
from orchestration.twin.fit import fit_constants
from orchestration.twin.replay import replay
from vllm_sim.twin import TwinError, read_twin
from vllm_users.measure.metrics import Slo

__all__ = ["check", "main", "replay_load"]


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as e:
        raise SystemExit(f"twin_offline: {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise SystemExit(f"twin_offline: {path}: not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise SystemExit(f"twin_offline: {path}: expected a JSON object")
    return doc


def refit(profile: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The twin's constants fitted again from the profile's probe points, as calibrate fits them."""
    raw = dict(profile["points"])
    raw["api_processes"] = int((profile["constants"].get("api_server_count") or {}).get("value") or 1)
    return fit_constants(raw, profile["server"])


def replay_load(c: dict[str, dict[str, Any]], path: dict[str, Any] | None, load: Load) -> dict[str, Any]:
    """`load` through the twin, with the arrivals and output lengths run_load draws for it (orchestration/twin/
    check.py: the same seeds), summarised as run_load summarises the server's."""
    lengths = random.Random(load.seed + 1)
    outputs = [
        max(
            2, round(load.output_tokens * lengths.uniform(1.0 - load.output_spread, 1.0 + load.output_spread))
        )
        for _ in range(load.requests)
    ]
    prompts = [load.prompt_tokens] * load.requests
    if load.rate > 0:
        rng, at, arrivals = random.Random(load.seed), 0.0, []
        for _ in range(load.requests):
            at += rng.expovariate(load.rate)
            arrivals.append(at)
        served = replay(c, prompts, outputs, arrivals_s=arrivals, path=path)
    else:
        served = replay(c, prompts, outputs, users=load.concurrency, path=path)
    tpots = [1000.0 * s.tpot_s for s in served if s.tpot_s is not None]
    wall = max(s.end_s for s in served)
    return {
        "load": load.name,
        "requests": load.requests,
        "ttft_ms_median": statistics.median(1000.0 * s.ttft_s for s in served),
        "tpot_ms_median": statistics.median(tpots) if tpots else None,
        "output_tok_s": sum(s.output for s in served) / wall if wall > 0 else None,
    }


def _mean(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for k in KEYS:
        vals = [r.get(k) for r in rows]
        out[k] = (
            statistics.mean(v for v in vals if v is not None) if all(v is not None for v in vals) else None
        )
    return out


def _loads(
    c: dict[str, dict[str, Any]], path: dict[str, Any] | None, recorded: dict[str, Any], max_model_len: int
) -> list[dict[str, Any]]:
    """Each recorded load: the server's two runs' mean against the twin's replay of the same two seeds."""
    by_name = {load.name: load for load in gpu_loads(max_model_len)}
    rows = []
    for r in recorded.get("loads") or []:
        load = by_name.get(r["load"])
        if load is None or "server" not in r:
            continue
        runs = [r["server"], *([r["server_again"]] if "server_again" in r else [])]
        seeds = [load.seed, load.seed + 1000][: len(runs)]  # bench_twin_server's second run: seed + 1000
        twin = _mean([replay_load(c, path, dataclasses.replace(load, seed=s)) for s in seeds])
        server = _mean(runs)
        rows.append({"load": load.name, "server": server, "twin": twin, "error": compare(server, twin)})
    return rows


def _rounds(
    corpus: str, c: dict[str, dict[str, Any]], path: dict[str, Any] | None, work: str, with_range: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each recorded round's steps judged on the twin, and the twin's own search once per round."""
    steps_out, rounds = [], []
    for k, rd in enumerate(sorted(glob.glob(os.path.join(corpus, "server-*")))):
        doc, steps = recorded_steps(rd)
        slo = Slo(limits_ms=dict(doc["slo_ms"]))
        pct, err = float(doc["slo_percentile"]), float(doc["max_error_rate"])
        for s in steps:
            v = replay_step(c, path, s, slo, pct, err, os.path.join(work, os.path.basename(rd)))
            steps_out.append(
                {
                    "round": os.path.basename(rd),
                    "step": s["name"],
                    "target": s["target"],
                    "server": s["verdict"],
                    "twin": "probe" if v["passed"] is None else ("holds" if v["passed"] else "fails"),
                    "server_rate": s["achieved_rate"] if s["target"] is None else None,
                    "twin_rate": v.get("achieved_rate") if s["target"] is None else None,
                    "twin_reasons": v.get("reasons") or [],
                }
            )
        prompt, output = median_prompt(steps)
        seed = 100_000 * (k + 1)  # bench_twin_server's seed of round k
        fixed = (path, prompt, output, steps[0]["meta"], slo, pct, err)

        def answer(
            cc: dict[str, dict[str, Any]], seed: int = seed, fixed: tuple[Any, ...] = fixed
        ) -> float | None:
            got: float | None = twin_search(cc, *fixed, seed=seed)["max_rate"]
            return got

        twin = answer(c)
        row: dict[str, Any] = {"round": os.path.basename(rd), "server": doc.get("max_rate"), "twin": twin}
        if twin is not None and with_range:
            # the search's own spread: the same twin on other seeds (its steps' arrivals), a bracket apart or more
            others = [answer(c, seed + k) for k in (1, 2)]
            row["range"] = answer_range(c, twin, answer, [a or 0.0 for a in others])
        rounds.append(row)
    return steps_out, rounds


def check(corpus: str, *, as_recorded: bool = False, with_range: bool = True) -> dict[str, Any]:
    """The offline check of the twin against the recording in `corpus` (its JSON result); `with_range`: the
    answer's range over the fit's uncertainties too (14 more searches a round)."""
    try:
        profile = read_twin(os.path.join(corpus, "twin.json"))
    except TwinError as e:
        raise SystemExit(f"twin_offline: {e}") from None
    recorded = _read(os.path.join(corpus, "twin_server.server.json"))
    c = profile["constants"] if as_recorded else refit(profile)
    path = profile["points"].get("path_latency")
    t0 = time.perf_counter()
    loads = _loads(c, path, recorded, int(c["max_model_len"]["value"]))
    with tempfile.TemporaryDirectory(prefix="twin-offline-") as work:
        steps, rounds = _rounds(corpus, c, path, work, with_range)
    server = [r["server"] for r in rounds if r["server"] is not None]
    twin = [r["twin"] for r in rounds if r["twin"] is not None]
    answer = (
        statistics.mean(twin) / statistics.mean(server) - 1.0 if server and len(twin) == len(rounds) else None
    )
    judged = [s for s in steps if s["target"] is not None]
    ranges = [r["range"] for r in rounds if "range" in r]
    span = None
    if server and ranges and len(ranges) == len(rounds):
        low, high = statistics.mean(r["low"] for r in ranges), statistics.mean(r["high"] for r in ranges)
        span = {
            "low": round(low, 3),
            "high": round(high, 3),
            "server": round(statistics.mean(server), 3),
            "holds_server": low <= statistics.mean(server) <= high,
        }
    return {
        "corpus": os.path.abspath(corpus),
        "constants": "as recorded in twin.json" if as_recorded else "refitted from twin.json's points",
        "fitted": {k: {"value": v["value"], "uncertainty": v.get("uncertainty")} for k, v in c.items()},
        "load_errors": {r["load"]: r["error"] for r in loads},
        "loads": loads,
        "steps": steps,
        "steps_agreeing": sum(s["server"] == s["twin"] for s in judged),
        "steps_judged": len(judged),
        "rounds": rounds,
        "find_max_rate_error": finite(answer),
        "find_max_rate_range": span,
        "unresolved": unresolved(c),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f} %"


def print_report(res: dict[str, Any]) -> None:
    """The error table, as the device run's table reads."""
    rows = []
    for r in res["loads"]:
        row = {"load": r["load"]}
        for k in KEYS:
            s, t = r["server"][k], r["twin"][k]
            row[k] = f"{s:.4g} / {t:.4g} ({_pct(r['error'][k])})" if s is not None and t is not None else "-"
        rows.append(row)
    print_table(rows, ["load", *KEYS], f"loads: server (mean of its runs) / twin ({res['constants']})")
    print_table(
        [{**s, "twin_reasons": "; ".join(s["twin_reasons"])[:90]} for s in res["steps"]],
        ["round", "step", "server", "twin", "twin_reasons"],
        f"find-max-rate steps: {res['steps_agreeing']} of {res['steps_judged']} verdicts agree",
    )
    print_table(res["rounds"], ["round", "server", "twin"], "find-max-rate answer, req/s")
    print(
        f"find-max-rate error: {_pct(res['find_max_rate_error'])} (the twin's answers over the rounds' mean)"
    )
    span = res["find_max_rate_range"]
    if span is not None:
        verdict = "holds" if span["holds_server"] else "DOES NOT hold"
        print(
            f"the twin's answer over the fit's uncertainties: [{span['low']:.1f}, {span['high']:.1f}] req/s, which "
            f"{verdict} the server's {span['server']:.1f}"
        )
    if res["unresolved"]:
        print("not resolved (uncertainty >= value): " + ", ".join(res["unresolved"]))
    print(f"({res['seconds']} s)", flush=True)


def main(argv: list[str] | None = None) -> int:
    """`python -m benchmarks.twin_offline CORPUS_DIR [--json OUT] [--as-recorded] [--no-range]`."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", help="a recorded server: twin.json, twin_server.server.json, server-K/")
    ap.add_argument("--json", default=None, help="write the result here")
    ap.add_argument(
        "--as-recorded", action="store_true", help="the profile's constants as written, not refitted"
    )
    ap.add_argument(
        "--no-range", action="store_true", help="no range over the fit's uncertainties (one search a round)"
    )
    a = ap.parse_args(argv)
    inside = glob.glob(os.path.join(a.corpus, "*", "twin.json"))
    if not os.path.isfile(os.path.join(a.corpus, "twin.json")) and len(inside) == 1:
        a.corpus = os.path.dirname(
            inside[0]
        )  # the folder the tarballs unpack into (twin-a1/), given its parent
    if not os.path.isfile(os.path.join(a.corpus, "twin.json")):
        print(
            f"twin_offline: {a.corpus}: no twin.json (expected a recorded server's folder)", file=sys.stderr
        )
        return 2
    res = check(a.corpus, as_recorded=a.as_recorded, with_range=not a.no_range)
    print_report(res)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as fh:
            json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
