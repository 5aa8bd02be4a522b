"""`vllm-locust run` against a server with wire quirks (tests/unit/client/quirk_server.py), preflight included:
streams that end cleanly after finish_reason and usage but without `data: [DONE]` are successes, counted in
`missing_done_requests`; interim 1xx responses before every answer are skipped."""

from __future__ import annotations

import pytest

from tests.integration.core.helpers import cli
from tests.unit.client.quirk_server import CONTINUE, EARLY_HINTS, Quirks, serve_threaded

pytestmark = pytest.mark.timeout(200)

N = 20


@pytest.mark.parametrize(
    ("quirks", "missing_done"),
    [
        pytest.param(Quirks(done=False), N, id="no-done"),
        pytest.param(Quirks(interim=(CONTINUE, EARLY_HINTS, EARLY_HINTS)), 0, id="interim-1xx"),
    ],
)
def test_run_counts_quirky_answers_as_successes(tmp_path, quirks: Quirks, missing_done: int) -> None:
    with serve_threaded(quirks) as srv:
        r = cli(
            [
                "--host",
                f"http://127.0.0.1:{srv.port}",
                "--num-prompts",
                str(N),
                "--users",
                "2",
                "--workers",
                "1",
                "--output-len",
                "4",
            ],
            str(tmp_path),
        )
        streamed = srv.requests.get("/v1/chat/completions", 0)
    assert r.rc == 0, r.logs()[-3000:]
    res = r.result
    assert res["completed"] == N and res["failed"] == 0 and res["errors_by_kind"] == {}
    assert res.get("missing_done_requests", 0) == missing_done
    recs = r.records()
    assert len(recs) == N and all(x["error"] is None and len(x["chunk_times_us"]) == 4 for x in recs)
    assert sum(1 for x in recs if (x.get("extra") or {}).get("no_done")) == missing_done
    assert streamed >= N + 1  # the load and the preflight's stream (calibration's probes come on top)
    if missing_done:
        assert "without [DONE]" in r.out, r.out[-2000:]  # the console summary says so
    assert "Traceback" not in r.logs()
