"""On the device (../shared/gpu recipe, vLLM up): NVML's energy counter and power over two runs of our client.

Samples power, the total-energy counter, utilisation, SM clock and throttle reasons every 0.2 s through `pynvml`
while `vllm-locust run` holds 16 and then 256 streams for 40 s each, and writes `$OUT/energy_probe.json`: the
ground truth a GPU exporter's figures are checked against. Run: `PYTHONPATH=/tmp/site:. python3
benchmarks/gpu/energy_probe.py` (tests/data/gpu/h100_nvml_energy_probe.json is one such recording).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import pynvml as nvml  # type: ignore[import-not-found]

__all__ = ["main"]


def _sample(handle: Any, stop: threading.Event, rows: list[list[float]]) -> None:
    """Append one row of NVML readings every 0.2 s until `stop` is set."""
    while not stop.is_set():
        rows.append(
            [
                time.time(),
                nvml.nvmlDeviceGetPowerUsage(handle) / 1000,
                nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000,
                nvml.nvmlDeviceGetUtilizationRates(handle).gpu,
                nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
                nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle),
            ]
        )
        time.sleep(0.2)


def main() -> None:
    """Two loads with NVML sampled beside them; the JSON under $OUT and one line per load."""
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    res: dict[str, Any] = {"gpu": nvml.nvmlDeviceGetName(handle), "runs": []}
    for users in (16, 256):
        rows: list[list[float]] = []
        stop = threading.Event()
        sampler = threading.Thread(target=_sample, args=(handle, stop, rows))
        sampler.start()
        out_dir = f"/tmp/energy-{users}"
        cmd = [sys.executable, "-m", "orchestration.cli", "run", "--host", "http://127.0.0.1:8000", "--model", "rand",
               "--tokenizer", "/tmp/model", "--users", str(users), "--run-time", "40s", "--input-len", "512",
               "--output-len", "128", "--ignore-eos", "--workers", "4", "--output-dir", out_dir, "--run-name", "r",
               "--quiet"]  # fmt: skip
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        t1 = time.time()
        stop.set()
        sampler.join()
        path = f"{out_dir}/r/result.json"
        r = json.load(open(path)) if os.path.exists(path) else {}
        keys = ("completed", "total_output_tokens", "output_throughput", "request_throughput")
        res["runs"].append(
            {"users": users, "rc": p.returncode, "t0": t0, "t1": t1, "tail": p.stdout[-1500:] + p.stderr[-800:],
             "result_keys": {k: r.get(k) for k in keys}, "samples": rows}
        )  # fmt: skip
    with open(os.path.join(os.environ["OUT"], "energy_probe.json"), "w") as fh:
        json.dump(res, fh)
    for run in res["runs"]:
        s = run["samples"]
        joules = s[-1][2] - s[0][2]
        tokens = run["result_keys"].get("total_output_tokens")
        per_token = round(joules / tokens, 4) if tokens else None
        print(run["users"], run["rc"], "J", round(joules, 1), "J/token", per_token)


if __name__ == "__main__":
    main()
