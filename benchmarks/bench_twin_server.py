"""The twin against a server that is already running (a GPU vLLM): calibrate, three loads, `--find-max-rate`.

    PYTHONPATH=/tmp/site:$PWD python3 -m benchmarks.bench_twin_server --host http://127.0.0.1:8000 --model rand \\
        --work /tmp/twin --phases calibrate,loads     # then, a call each: --phases search --rounds 1 --first-round K

The GPU comparison (../shared/gpu recipe; the device runs at most 10 minutes a call, so the phases resume
from --work: `twin.json` and the results so far live there):

- calibrate: `vllm-locust calibrate --budget` against the server; its twin.json;
- loads: three loads the probe did not use (orchestration/twin/check.py: a closed loop, a Poisson rate, a prompt
  longer than the probe's longest), each sent to the server, to the twin, and to the server again with new
  prompts (so its prefix cache does not answer it): the server's drift between its two runs is printed beside the
  twin's error against their mean;
- search: one `--find-max-rate` SLO, rounds interleaved server, twin, server, twin..., each round its own --seed.

The twin (`vllm-locust sim --twin`) is pinned to --sim-cpu, off the load generator's CPUs. `--side server` and
`--side twin` run one side each (two processes at once on disjoint CPUs: benchmarks/gpu/twin_gpu.sh), each into
its own file, and `--phases merge` makes one result of them. Results merge into
--work/twin_server.json and are written to benchmarks/results/twin_server.json.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import shlex
from pathlib import Path
from typing import Any

from benchmarks.bench_twin_search import run_cli, search, sim_lateness, summarize
from benchmarks.common import print_table, write_json
from orchestration.twin.check import Load, compare, run_load
from vllm_sim.launch import start_simulator

SLO = (
    "--find-max-rate --goodput ttft:300 tpot:25 --slo-percentile 90 --input-len 1024 --output-len 64 "
    "--ignore-eos --workers 4"
)
KEYS = ("ttft_ms_median", "tpot_ms_median", "output_tok_s")


def gpu_loads(max_model_len: int) -> list[Load]:
    """A closed loop of 32 users, a Poisson 20 req/s, and a prompt near the server's longest (the probe's: 1536)."""
    long_prompt = min(3500, max_model_len - 64)
    return [
        Load("closed-32", 96, 512, 64, concurrency=32, output_spread=0.5),
        Load("poisson-20/s", 100, 256, 64, rate=20.0),
        Load(f"long-prompt-{long_prompt}", 4, long_prompt, 16),
    ]


def _loads(
    host: str, model: str, twin_url: str | None, doc: dict[str, Any], side: str
) -> list[dict[str, Any]]:
    tpw = doc["points"].get("tokens_per_word") or 1.0
    rows = []
    for load in gpu_loads(int(doc["constants"]["max_model_len"]["value"])):
        row: dict[str, Any] = {"load": load.name}
        if side in ("both", "server"):
            row["server"] = run_load(host, model, load, timeout_s=300, tokens_per_word=tpw)
        if twin_url is not None:
            row["twin"] = run_load(twin_url, model, load, timeout_s=300)
        if side in ("both", "server"):
            again = dataclasses.replace(load, seed=load.seed + 1000)
            row["server_again"] = run_load(host, model, again, timeout_s=300, tokens_per_word=tpw)
        print(json.dumps(row), flush=True)
        rows.append(_judged(row))
    return rows


def _judged(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with the twin's error against the server's mean and the server's drift, where both sides ran."""
    if not all(k in row for k in ("server", "server_again", "twin")):
        return row
    real1, real2 = row["server"], row["server_again"]
    real = {
        k: (real1[k] + real2[k]) / 2 if real1[k] is not None and real2[k] is not None else None for k in KEYS
    }
    return {
        **row,
        "error": compare(real, row["twin"]),
        "drift": {k: abs(v) for k, v in compare(real1, real2).items() if v is not None},
    }


def merge(work: Path) -> dict[str, Any]:
    """One result from a server side and a twin side that ran at once (`--side`), each from its own file."""
    server = json.loads((work / "twin_server.server.json").read_text())
    twin = json.loads((work / "twin_server.twin.json").read_text())
    res = {**server, "sides": "server and twin at once, on disjoint CPUs"}
    by_name = {r["load"]: r for r in twin.get("loads", [])}
    if "loads" in server:
        res["loads"] = [_judged({**r, **{"twin": by_name[r["load"]]["twin"]}}) for r in server["loads"]]
    if "search" in server and "search" in twin:
        rows = sorted(
            server["search"]["runs"] + twin["search"]["runs"], key=lambda x: (x["round"], x["server"])
        )
        res["search"] = {**server["search"], "runs": rows, "summary": summarize(rows, "server")}
    return res


def _table(rows: list[dict[str, Any]]) -> None:
    flat = []
    for r in rows:
        cell = {"load": r["load"]}
        for k in KEYS:
            a, b, t = r["server"][k], r["server_again"][k], r["twin"][k]
            e, d = r["error"].get(k), r["drift"].get(k)
            cell[k] = (
                f"{a:.4g}, {b:.4g} / {t:.4g} ({e:+.1%}; {d:.1%})"
                if None not in (a, b, t, e, d)
                else f"{a}, {b} / {t}"
            )
        flat.append(cell)
    print_table(
        flat, ["load", *KEYS], "server first, again / twin (twin's error vs the server's mean; its drift)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--work", type=Path, required=True, help="twin.json and the results so far")
    ap.add_argument("--phases", default="calibrate,loads,search", help="calibrate, loads, search; or merge")
    ap.add_argument(
        "--side",
        choices=("both", "server", "twin"),
        default="both",
        help="both: interleaved in this process; server or twin: that side only, into twin_server.SIDE.json "
        "(run both at once on disjoint CPUs, then --phases merge)",
    )
    ap.add_argument("--budget", type=int, default=120, help="calibrate's --budget, seconds")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--first-round", type=int, default=1, help="resume: the rounds so far stay in --work")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--slo", default=SLO, help="the search's options")
    ap.add_argument("--sim-cpu", type=int, default=None, help="the CPU the twin is pinned to")
    ap.add_argument("--calibrate-args", default="", help="more calibrate options")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    twin = a.work / "twin.json"
    res_path = a.work / ("twin_server.json" if a.side == "both" else f"twin_server.{a.side}.json")
    phases = a.phases.split(",")
    if "merge" in phases:
        merged = merge(a.work)
        (a.work / "twin_server.json").write_text(json.dumps(merged, indent=1, default=str))
        _report(merged)
        return
    res: dict[str, Any] = json.loads(res_path.read_text()) if res_path.exists() else {}
    if "calibrate" in phases:
        p = run_cli(
            [
                "calibrate",
                "--host",
                a.host,
                "--model",
                a.model,
                "--budget",
                f"{a.budget}s",
                "-o",
                str(twin),
                *shlex.split(a.calibrate_args),
            ],
            a.budget + 120,
        )
        print(p.stdout[-6000:], flush=True)
        if p.returncode != 0:
            raise SystemExit(f"calibrate failed ({p.returncode}): {p.stderr[-800:]}")
        res["calibrate"] = {"stdout": p.stdout[-8000:]}
    doc = json.loads(twin.read_text())
    res["constants"] = {
        k: {"value": v.get("value"), "uncertainty": v.get("uncertainty"), "source": v.get("source")}
        for k, v in doc["constants"].items()
    }
    res["fit"] = doc.get("fit")
    with contextlib.ExitStack() as stack:
        sim = None
        if a.side != "server" and {"loads", "search"} & set(phases):
            sim = stack.enter_context(start_simulator(["--twin", str(twin)], cpu=a.sim_cpu))
        urls = {"server": a.host, "twin": None if sim is None else sim.url}
        sides = [(n, u) for n, u in urls.items() if u is not None and a.side in ("both", n)]
        if "loads" in phases:
            res["loads"] = _loads(a.host, a.model, None if sim is None else sim.url, doc, a.side)
        if "search" in phases:
            slo = shlex.split(a.slo)
            rows = [x for x in res.get("search", {}).get("runs", []) if x["round"] < a.first_round]
            for r in range(a.first_round - 1, a.first_round - 1 + a.rounds):
                seed = 100_000 * (r + 1)  # its own prompts: nothing of an earlier round in the prefix cache
                for name, url in sides:
                    before = sim_lateness(url) if name == "twin" else None
                    row = {
                        "server": name,
                        "round": r + 1,
                        **search(
                            ["--host", url, "--model", a.model],
                            a.steps,
                            seed,
                            a.work / f"{name}-{r}",
                            600,
                            slo,
                        ),
                    }
                    if before is not None:
                        row["sim_lateness_s"] = sim_lateness(url, before)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
            res["search"] = {"slo": slo, "steps": a.steps, "runs": rows, "summary": summarize(rows, "server")}
    res_path.write_text(json.dumps(res, indent=1, default=str))
    _report(res)


def _report(res: dict[str, Any]) -> None:
    if "loads" in res and all("error" in r for r in res["loads"]):
        _table(res["loads"])
    if "search" in res:
        print_table(
            res["search"]["runs"],
            ["server", "round", "probe", "max_rate", "failing", "seconds", "rc"],
            "find-max-rate",
        )
        print(json.dumps(res["search"]["summary"], indent=1))
    print(f"wrote {write_json('twin_server', res)}")


if __name__ == "__main__":
    main()
