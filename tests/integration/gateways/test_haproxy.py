"""`vllm-locust run` through HAProxy (Debian package `haproxy`) balancing over simulator processes: every request
the run counts reached one of them (their own /sim/stats), both served some, and the streams were measured whole.
One run also has HAProxy rewrite the media type (`Text/Event-Stream; charset=UTF-8`, RFC 9110 §8.3.1: any case).
Skipped, saying so, where haproxy is not installed."""

from __future__ import annotations

import json
import urllib.request
from contextlib import ExitStack

import pytest

from tests.integration.core.helpers import cli
from tests.integration.gateways.haproxy import HAPROXY, MISSING, haproxy
from vllm_sim.launch import start_simulator
from vllm_users.distributed.run_end import preflight_requests

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(HAPROXY is None, reason=MISSING),
]

N, OUT = 24, 8
BACKENDS = 2
# RFC 9110 §8.3.1: a media type is case-insensitive, and parameters may follow
REWRITE = 'http-response set-header Content-Type "Text/Event-Stream; charset=UTF-8" if { res.hdr(content-type) -m beg text/event-stream }'  # noqa: E501


def _served(url: str) -> int:
    with urllib.request.urlopen(url + "/sim/stats", timeout=5) as resp:
        return int(json.load(resp)["generate_requests"])


@pytest.mark.parametrize("rewrite_type", [False, True], ids=["plain", "media-type-rewritten"])
def test_run_through_haproxy_counts_what_the_backends_served(tmp_path, rewrite_type: bool) -> None:
    with ExitStack() as stack:
        sims = [
            stack.enter_context(
                start_simulator(["--fixed", "--ttft-ms", "5", "--itl-ms", "2", "--seed", str(i)])
            )
            for i in range(BACKENDS)
        ]
        url = stack.enter_context(
            haproxy(str(tmp_path), [s.port for s in sims], [REWRITE] if rewrite_type else [])
        )
        r = cli(
            [
                "--host",
                url,
                "--num-prompts",
                str(N),
                "--users",
                "4",
                "--workers",
                "1",
                "--output-len",
                str(OUT),
                "--ignore-eos",
            ],
            str(tmp_path),
        )
        served = [_served(s.url) for s in sims]
    assert r.rc == 0, r.logs()[-3000:]
    res = r.result
    assert res["completed"] == N and res["failed"] == 0 and res["errors_by_kind"] == {}
    assert res["total_output_tokens"] == N * OUT and res["tokens_estimated_requests"] == 0
    assert sum(served) == res["completed"] + res["failed"] + preflight_requests(r.run_dir), served
    assert all(n > 0 for n in served), served  # both backends took load
    recs = r.records()
    assert all(x["finish_reason"] == "length" for x in recs)
    assert all(_whole(x) for x in recs) and sum(len(x["chunk_times_us"]) == OUT for x in recs) > len(recs) / 2
    assert "Traceback" not in r.logs()


def _whole(rec: dict) -> bool:
    """Every chunk of the stream timed, or (a client that read late on a busy box) all of them counted as
    delivered at once; a gateway that buffers every stream still fails the majority check beside it."""
    extra = rec.get("extra") or {}
    return len(rec["chunk_times_us"]) == OUT or extra.get("chunks_at_once") == OUT
