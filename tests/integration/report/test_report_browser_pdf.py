"""The HTML renders in headless Chromium without console errors, the PDF in poppler, and the figures
they show equal the JSON's. Skipped, with the reason, when chromium or pdftoppm is not installed
(CI: apt-get install -y chromium poppler-utils)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from orchestration.commands.report import main
from tests.unit.report.helpers import make_records, server_samples, write_run

pytestmark = pytest.mark.timeout(180)
CHROMIUM = next(
    (shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-extensions",
    "--no-first-run",
    "--enable-logging=stderr",
    "--v=0",
]


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("rep")
    a = write_run(
        str(tmp / "base"), make_records(300, tail_every=25, tail_ms=400, turns=3), samples=server_samples()
    )
    b = write_run(
        str(tmp / "next"), make_records(300, ttft_ms=12, fail=6), samples=server_samples(hits_ratio=0.3)
    )
    out = str(tmp / "out")
    assert main([a, b, "-o", out, "--format", "html,pdf,json", "--quiet"]) == 0
    return out


def _chromium(*args: str, home: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM
    env = dict(os.environ, HOME=home)  # a fresh profile: no first-run state from other tests
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={home}/profile", *args],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
def test_html_in_headless_chromium(report_dir: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = "file://" + os.path.join(report_dir, "report.html")
    shot = str(tmp_path / "shot.png")
    p = _chromium(f"--screenshot={shot}", "--window-size=1280,4000", url, home=str(tmp_path))
    assert os.path.exists(shot), p.stderr[-2000:]
    console = [ln for ln in p.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln or "net::ERR" in ln]
    assert console == [], console
    from matplotlib.image import imread

    img = imread(shot)
    assert img.shape[0] >= 1000 and img.std() > 0.05  # not a blank page
    dom = _chromium("--dump-dom", url, home=str(tmp_path)).stdout
    data = json.load(open(os.path.join(report_dir, "report.json")))
    for i, run in enumerate(data["runs"]):
        m = re.search(r'data-key="median_ttft_ms"><td class="l">[^<]*</td>((?:\s*<td>[^<]*</td>)+)', dom)
        assert m, "summary table row missing in the rendered DOM"
        cells = re.findall(r"<td>([^<]*)</td>", m.group(1))
        assert cells[i] == f"{run['result']['median_ttft_ms']:.2f}"
    assert dom.count("<img") >= 4  # CDFs, latency-vs-throughput, two time series
    assert 'data-rule="failures"' in dom


@pytest.mark.skipif(
    shutil.which("pdftoppm") is None, reason="pdftoppm not installed (apt-get install -y poppler-utils)"
)
def test_pdf_renders_with_poppler(report_dir: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    pdf = os.path.join(report_dir, "report.pdf")
    subprocess.run(["pdftoppm", "-r", "30", "-png", pdf, str(tmp_path / "page")], check=True, timeout=60)
    pages = sorted(os.listdir(tmp_path))
    assert (
        len(pages) >= 5
    )  # the lead, tables and findings, then CDFs, latency/throughput, 2 time series, turns
    data = json.load(open(os.path.join(report_dir, "report.json")))
    if shutil.which("pdftotext"):
        text = subprocess.run(
            ["pdftotext", "-layout", pdf, "-"], capture_output=True, text=True, check=True
        ).stdout
        line = next(ln for ln in text.splitlines() if ln.strip().startswith("Median TTFT (ms)"))
        assert line.split()[-2:] == [f"{r['result']['median_ttft_ms']:.2f}" for r in data["runs"]]
        assert "Requests failed" in text
