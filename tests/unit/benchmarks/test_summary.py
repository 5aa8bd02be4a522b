"""run_all's generated section: median and spread per figure, the machine line, the page's markers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import bench_summary as summary  # noqa: E402

CPUINFO = (
    "processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu sse4_2 avx avx2 avx512f\nprocessor\t: 1\n"
)


def test_median_and_spread_per_group() -> None:
    runs = [
        {
            "load": "fid64",
            "client": "ours",
            "tok_per_cpu_s": v,
            "cpu": 0.2,
            "ttft_err_p50_ms": 0.1,
            "ttft_err_p99_ms": p,
        }
        for v, p in ((40_000, 1.0), (50_000, 3.0), (45_000, 2.0))
    ]
    runs.append({"load": "fid64", "client": "locust", "tok_per_cpu_s": 20_000.0, "cpu": float("nan")})
    t = summary.table("peers", runs).splitlines()
    assert (
        t[2]
        == "| fid64 | ours | 3 | 45,000 (40,000–50,000) | 0.20 (0.20–0.20) | 0.10 (0.10–0.10) | 2.00 (1.00–3.00) |"
    )
    assert t[3] == "| fid64 | locust | 1 | 20,000 | - | - | - |"  # NaN and absent figures are left out


def test_machine_line_names_cpu_isa_and_cores() -> None:
    line = summary.machine_line(CPUINFO)
    assert line == "Test CPU 9000; ISA: sse4_2, avx, avx2, avx512f; 2 logical CPUs"


def test_page_section_is_replaced_not_duplicated(tmp_path: Any) -> None:
    (tmp_path / "fidelity.json").write_text(
        json.dumps(
            {
                "date": "d",
                "runs": [
                    {
                        "streams": 64,
                        "ttft_err_p50_ms": 0.2,
                        "ttft_err_p99_ms": 1.5,
                        "itl_err_p99_ms": 0.1,
                        "loop_lag_p99_ms": 1,
                    }
                ],
            }
        )
    )
    page = tmp_path / "b.md"
    page.write_text(f"# Benchmarks\n\nprose stays, quoting `{summary.BEGIN}` and `{summary.END}`\n")
    summary.update_page(page, summary.render(tmp_path, CPUINFO))
    summary.update_page(page, summary.render(tmp_path, CPUINFO))
    text = page.read_text()
    assert text.startswith(f"# Benchmarks\n\nprose stays, quoting `{summary.BEGIN}` and `{summary.END}`\n")
    assert text.count(summary.BEGIN) == 2 and text.count(summary.END) == 2  # the quotes and the section
    assert "| 64 | None | 1 | 0.20 | 1.50 | 0.10 | 1.00 |" in text and "Test CPU 9000" in text
