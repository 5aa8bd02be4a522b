"""Where a TTFT goes: the server's histograms over the load (before/after /metrics snapshots) beside the client's
TTFT, TPOT and loop lag; exact means, bucket medians by hand, absent parts absent (never 0), several URLs."""

from __future__ import annotations

import json
import os

import pytest

from tests.unit.measure.helpers import rec
from vllm_users.distributed import run_end, server_scrape
from vllm_users.distributed.server_scrape import around_load_more
from vllm_users.measure.columns import columns_from_records
from vllm_users.measure.latency_breakdown import (
    FROM_CORE,
    FROM_TTFT,
    ClientLatency,
    breakdown_lines,
    client_latency,
    latency_breakdown,
    primary,
    server_part,
    spec_decode,
    url_rows,
)
from vllm_users.measure.run_result import RunResult
from vllm_users.measure.server_counters import LoadCounters, parse_metrics
from vllm_users.run_dir import server_metrics_name


def hist(name: str, buckets: list[tuple[str, float]], total: float, labels: str = "") -> str:
    """One Prometheus histogram family's text (cumulative buckets, sum, count = the +Inf bucket)."""
    sep = "," if labels else ""
    lines = [f"# TYPE {name} histogram"]
    lines += [f'{name}_bucket{{{labels}{sep}le="{le}"}} {c}' for le, c in buckets]
    lines += [f"{name}_sum{{{labels}}} {total}", f"{name}_count{{{labels}}} {buckets[-1][1]}"]
    return "\n".join(lines) + "\n"


def counter(name: str, v: float) -> str:
    return f"# TYPE {name} counter\n{name}_total 0\n".replace(" 0\n", f" {v}\n")


QUEUE = "vllm:request_queue_time_seconds"
PREFILL = "vllm:request_prefill_time_seconds"
TTFT = "vllm:time_to_first_token_seconds"
REQ_TPOT = "vllm:request_time_per_output_token_seconds"
ITL = "vllm:inter_token_latency_seconds"

BEFORE = parse_metrics(
    hist(QUEUE, [("0.01", 2), ("0.05", 4), ("0.1", 4), ("+Inf", 4)], 0.1)
    + hist(TTFT, [("0.1", 0), ("0.25", 4), ("0.5", 4), ("+Inf", 4)], 0.2)
    + hist(REQ_TPOT, [("0.01", 0), ("0.05", 4), ("+Inf", 4)], 0.08)
    + hist(ITL, [("0.01", 0), ("0.05", 40), ("+Inf", 40)], 0.4)
    + counter("vllm:spec_decode_num_drafts", 10)
    + counter("vllm:spec_decode_num_draft_tokens", 30)
    + counter("vllm:spec_decode_num_accepted_tokens", 12)
)
AFTER = parse_metrics(
    hist(QUEUE, [("0.01", 2), ("0.05", 8), ("0.1", 12), ("+Inf", 12)], 0.9)
    + hist(TTFT, [("0.1", 0), ("0.25", 6), ("0.5", 12), ("+Inf", 12)], 2.2)
    + hist(REQ_TPOT, [("0.01", 0), ("0.05", 12), ("+Inf", 12)], 0.24)
    + hist(ITL, [("0.01", 0), ("0.05", 140), ("+Inf", 140)], 0.9)
    + counter("vllm:spec_decode_num_drafts", 30)
    + counter("vllm:spec_decode_num_draft_tokens", 90)
    + counter("vllm:spec_decode_num_accepted_tokens", 57)
)
CLIENT = ClientLatency(
    requests=8,
    ttft_mean_ms=400.0,
    ttft_p50_ms=390.0,
    tpot_mean_ms=40.0,
    tpot_p50_ms=38.0,
    loop_lag_p50_ms=5.0,
    loop_lag_p99_ms=30.0,
)


def test_every_part_by_hand() -> None:
    part = server_part(BEFORE, AFTER, CLIENT)
    ttft = part["ttft"]
    # queue: 8 more observations, 0.8 s more in all -> 100 ms; rank 4 of the bucket increases (0.01: 0, 0.05: 4,
    # 0.1: 8) falls in (0.01, 0.05] -> the bucket 10-50 ms, no point inside it
    assert ttft["queue"] == {"count": 8.0, "mean_ms": pytest.approx(100.0), "p50_range_ms": [10.0, 50.0]}
    # engine TTFT: 2.0 s over 8 -> 250 ms; rank 4 in (0.25, 0.5] holding ranks 2..8 -> the bucket 250-500 ms
    assert ttft["engine"] == {"count": 8.0, "mean_ms": pytest.approx(250.0), "p50_range_ms": [250.0, 500.0]}
    assert "prefill" not in ttft  # not exported by this server: absent, never 0
    assert ttft["rest_mean_ms"] == pytest.approx(150.0)  # client 400 - engine 250
    assert ttft["api_server_mean_ms"] == pytest.approx(145.0)  # less our loop lag p50, 5 ms
    assert ttft["api_server_share"] == pytest.approx(145.0 / 400.0)
    # TPOT: the per-request series first (0.16 s over 8 requests = 20 ms), not inter-token latency's
    tpot = part["tpot"]
    assert tpot["engine"]["series"] == REQ_TPOT
    assert tpot["engine"]["mean_ms"] == pytest.approx(20.0)
    assert tpot["client_over_engine"] == pytest.approx(2.0)
    assert tpot["rest_mean_ms"] == pytest.approx(20.0)
    # speculative decoding: 20 drafts, 60 tokens drafted, 45 accepted
    assert part["spec_decode"] == pytest.approx(
        {
            "drafts": 20.0,
            "draft_tokens": 60.0,
            "accepted_tokens": 45.0,
            "acceptance_rate": 0.75,
            "mean_accepted_length": 1.0 + 45.0 / 20.0,
        }
    )


def test_tpot_falls_back_to_inter_token_latency() -> None:
    drop = {k: v for k, v in AFTER.items() if not k.startswith(REQ_TPOT)}
    tpot = server_part(BEFORE, drop, CLIENT)["tpot"]
    assert tpot["engine"]["series"] == ITL
    assert tpot["engine"]["mean_ms"] == pytest.approx(500.0 / 100.0)  # 0.5 s over 100 tokens


def test_absent_parts_are_absent_never_zero() -> None:
    only_queue = parse_metrics(hist(QUEUE, [("0.1", 3), ("+Inf", 3)], 0.15))
    part = server_part({}, only_queue, CLIENT)
    # every observation in one bucket: that bucket is all that is known of the p50
    assert part == {
        "ttft": {"queue": {"count": 3.0, "mean_ms": pytest.approx(50.0), "p50_range_ms": [0.0, 100.0]}}
    }
    # no engine TTFT: no rest; no TPOT histogram: no tpot; no spec counters: no spec_decode
    assert server_part({}, {}, CLIENT) == {}
    # the client's loop lag unknown: the rest stays, the API server's part (which needs it) does not
    no_lag = ClientLatency(8, 400.0, 390.0, None, None)
    ttft = server_part(BEFORE, AFTER, no_lag)["ttft"]
    assert ttft["rest_mean_ms"] == pytest.approx(150.0)
    assert "api_server_mean_ms" not in ttft and "api_server_share" not in ttft
    assert "client_over_engine" not in server_part(BEFORE, AFTER, no_lag)["tpot"]
    # no observation in the window: a histogram that did not move says nothing
    assert "ttft" not in server_part(AFTER, AFTER, CLIENT)
    # counters present but nothing drafted: no acceptance rate (not 0 %)
    assert spec_decode(AFTER, AFTER) is None
    assert spec_decode({}, {}) is None


def test_several_urls_each_and_combined() -> None:
    other_before = parse_metrics(hist(TTFT, [("0.1", 2), ("+Inf", 2)], 0.1))
    other_after = parse_metrics(hist(TTFT, [("0.1", 6), ("+Inf", 10)], 0.9))
    loads = [
        LoadCounters("http://a:8000/metrics", BEFORE, AFTER),
        LoadCounters("http://b:8000/metrics", other_before, other_after),
    ]
    block = latency_breakdown(loads, CLIENT)
    assert block is not None
    assert [s["url"] for s in block["servers"]] == ["http://a:8000/metrics", "http://b:8000/metrics"]
    assert block["servers"][0]["ttft"]["engine"]["mean_ms"] == pytest.approx(250.0)
    assert block["servers"][1]["ttft"]["engine"]["mean_ms"] == pytest.approx(100.0)  # 0.8 s over 8
    assert "tpot" not in block["servers"][1]  # b exports no TPOT histogram
    # both replicas' increases summed: 2.8 s over 16 first tokens
    combined = block["combined"]
    assert combined["ttft"]["engine"]["mean_ms"] == pytest.approx(175.0)
    assert combined["ttft"]["rest_mean_ms"] == pytest.approx(225.0)
    assert primary(block) == combined
    assert block["client"]["loop_lag_p99_ms"] == 30.0
    one = latency_breakdown(loads[:1], CLIENT)
    assert one is not None and "combined" not in one and primary(one) == one["servers"][0]
    assert latency_breakdown([], CLIENT) is None


def test_client_latency_over_every_record() -> None:
    recs = [
        rec(1.0, [100, 110, 130], 3),  # TTFT 100 ms, TPOT 30 ms / 2 = 15 ms
        rec(2.0, [300, 340], 2),  # TTFT 300 ms, TPOT 40 ms
        rec(3.0, [50], 1),  # TTFT 50 ms, no TPOT (one token)
        rec(4.0, [], None, error="http", status=500),  # failed: neither
    ]
    health = {
        "workers": {
            "w0": {"loop_lag_p50_ms": 1.0, "loop_lag_p99_ms": 9.0},
            "w1": {"loop_lag_p50_ms": 3.0, "loop_lag_p99_ms": None},
        }
    }
    c = client_latency(columns_from_records(recs), health)
    assert c.requests == 3
    assert c.ttft_mean_ms == pytest.approx(150.0)
    assert c.ttft_p50_ms == pytest.approx(100.0)
    assert c.tpot_mean_ms == pytest.approx(27.5)
    assert (c.loop_lag_p50_ms, c.loop_lag_p99_ms) == (3.0, 9.0)  # the worst worker's
    none = client_latency(columns_from_records(recs[3:]), None)
    assert none.ttft_mean_ms is None and none.tpot_mean_ms is None and none.loop_lag_p50_ms is None


def test_result_keeps_the_block_and_the_summary_prints_it() -> None:
    from orchestration.report.summary import format_summary

    block = latency_breakdown([LoadCounters("http://a:8000/metrics", BEFORE, AFTER)], CLIENT)
    res = RunResult(None, None, None, None, None, None, None, None, latency_breakdown=block)
    doc = res.to_json()
    assert doc["latency_breakdown"] == block
    back = RunResult.from_json(json.loads(json.dumps(doc)))
    assert back.latency_breakdown == block and "latency_breakdown" not in back.metrics
    text = format_summary(doc)
    assert "Where a TTFT goes" in text
    rows = {ln[:32].strip(): ln[32:].split() for ln in text.splitlines() if ln.startswith("  ")}
    assert rows["engine TTFT"] == ["250.0", "250-500"]  # the p50's bucket, not 333.3 interpolated in it
    assert rows["queue (engine)"] == ["100.0", "10-50"]
    assert rows["rest: API server + network"] == ["150.0"]
    assert rows["less our loop lag p50"] == ["145.0", "36%", "of", "TTFT"]
    assert rows["client TTFT"] == ["400.0", "390.0"]
    # TPOT p50: (0.01, 0.05] holds all 8
    assert rows["engine TPOT"] == ["20.0", "10-50", "client", "2.00x"]
    assert "acceptance 75.0%, mean accepted length 3.25" in text
    assert "prefill" not in text  # absent: no row, not a 0
    assert "Where a TTFT goes" not in format_summary(RunResult(*([None] * 8)).to_json())
    assert breakdown_lines(None) == []


def test_the_engine_core_stamps_move_the_api_servers_part() -> None:
    """Where vLLM exports queue and prefill (both stamped by its engine core), the engine TTFT less them is the API
    server's too (its clock starts and stops in the API server): the API server's part is then the client's TTFT
    less queue, prefill and our loop lag, and the console says so."""
    prefill = parse_metrics(hist(PREFILL, [("0.05", 8), ("+Inf", 8)], 0.24))  # 8 prefills, 30 ms each
    part = server_part(BEFORE, AFTER | prefill, CLIENT)
    ttft = part["ttft"]
    assert ttft["prefill"]["mean_ms"] == pytest.approx(30.0)
    assert ttft["frontend_mean_ms"] == pytest.approx(250.0 - 100.0 - 30.0)  # engine TTFT - queue - prefill
    assert ttft["rest_mean_ms"] == pytest.approx(150.0)  # still client - engine TTFT
    assert ttft["api_server_mean_ms"] == pytest.approx(400.0 - 100.0 - 30.0 - 5.0)
    assert ttft["api_server_share"] == pytest.approx(265.0 / 400.0)
    assert ttft["api_server_from"] == FROM_CORE
    assert server_part(BEFORE, AFTER, CLIENT)["ttft"]["api_server_from"] == FROM_TTFT  # no prefill histogram
    lines = breakdown_lines({"client": {}, "servers": [{"url": "u", **part}]})
    rows = {ln[:32].strip(): ln[32:].split() for ln in lines if ln.startswith("  ")}
    assert rows["of it outside engine core"] == ["120.0"]
    assert rows["API server in all, less lag"] == ["265.0", "66%", "of", "TTFT"]
    assert "less our loop lag p50" not in rows


def test_around_load_more_scrapes_each_further_url_with_its_headers(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    urls = ["http://a/metrics", "http://b/metrics", "http://c/metrics"]
    for i, url in enumerate(urls):
        with open(os.path.join(tmp_path, server_metrics_name(i)), "w") as fh:
            fh.write(json.dumps({"t": 1.0, "v": BEFORE, "url": url}) + "\n")
    asked: list[tuple[str, object]] = []

    def scrape(url: str, timeout: float = 5.0, headers: object = None) -> dict[str, float] | None:
        asked.append((url, headers))
        return None if url == "http://c/metrics" else AFTER

    monkeypatch.setattr(server_scrape, "scrape", scrape)
    got = around_load_more(str(tmp_path), headers={"http://b/metrics": {"Authorization": "Bearer b"}})
    assert [g.url for g in got] == ["http://b/metrics"]  # the first file is around_load's; c's scrape failed
    assert got[0].before == BEFORE and got[0].after == AFTER
    assert asked == [("http://b/metrics", {"Authorization": "Bearer b"}), ("http://c/metrics", None)]
    assert server_metrics_name(0) == "server_metrics.jsonl"


def test_master_adds_the_block_from_every_url(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    with open(os.path.join(tmp_path, "records.jsonl"), "w") as fh:
        fh.write(rec(1.0, [400, 420], 2, host="a:80").to_json() + "\n")  # a fleet: the record names its host
    with open(os.path.join(tmp_path, server_metrics_name(1)), "w") as fh:
        fh.write(json.dumps({"t": 1.0, "v": {}, "url": "http://b/metrics"}) + "\n")
    monkeypatch.setattr(server_scrape, "scrape", lambda url, timeout=5.0, headers=None: AFTER)
    monkeypatch.setenv(run_end.METRICS_HEADERS_MORE_ENV, json.dumps({"http://b/metrics": {"X": "1"}}))
    res = RunResult(None, None, None, None, None, None, None, None)
    out = run_end.with_latency_breakdown(res, str(tmp_path), LoadCounters("http://a/metrics", BEFORE, AFTER))
    block = out.latency_breakdown
    assert block is not None
    assert [s["url"] for s in block["servers"]] == ["http://a/metrics", "http://b/metrics"]
    assert block["client"]["ttft_mean_ms"] == pytest.approx(400.0)
    assert block["servers"][0]["ttft"]["rest_mean_ms"] == pytest.approx(150.0)  # a answered the one request
    assert (
        block["servers"][1]["client"]["requests"] == 0 and "rest_mean_ms" not in block["servers"][1]["ttft"]
    )
    # without any scrape around the load: no block at all
    empty = tmp_path / "none"
    empty.mkdir()
    assert run_end.with_latency_breakdown(res, str(empty), None).latency_breakdown is None


def test_a_p50_is_the_bucket_it_falls_in_never_an_interpolated_point() -> None:
    """vLLM's queue-time buckets start at 0.3 s: 4,096 queue times of 0.03 ms on average all fall in [0, 0.3 s], and
    Prometheus-style interpolation reads a p50 of 150 ms, 5,000 x the mean. Said as the bucket 0-300 instead; and
    spread over buckets, still the bucket: an engine TPOT p50 "6.2" interpolated in 5-10 ms sat beside a client's 9.0
    with nothing to say the engine's was a guess."""
    before = parse_metrics(hist(QUEUE, [("0.3", 0), ("0.5", 0), ("+Inf", 0)], 0.0))
    after = parse_metrics(hist(QUEUE, [("0.3", 4096), ("0.5", 4096), ("+Inf", 4096)], 0.12288))
    queue = server_part(before, after, CLIENT)["ttft"]["queue"]
    assert "p50_ms" not in queue and queue["p50_range_ms"] == [0.0, 300.0]
    assert queue["mean_ms"] == pytest.approx(0.03)
    spread = parse_metrics(hist(QUEUE, [("0.3", 2458), ("0.5", 4096), ("+Inf", 4096)], 1.2))
    assert server_part(before, spread, CLIENT)["ttft"]["queue"] == {
        "count": 4096.0,
        "mean_ms": pytest.approx(1200.0 / 4096),
        "p50_range_ms": [0.0, 300.0],
    }
    # the p50 past the last finite edge: a lower bound only
    past = parse_metrics(hist(QUEUE, [("0.3", 1), ("0.5", 1), ("+Inf", 4096)], 4000.0))
    assert server_part(before, past, CLIENT)["ttft"]["queue"]["p50_range_ms"] == [500.0, None]


def test_the_console_shows_an_engine_p50_as_its_bucket() -> None:
    tpot = "vllm:request_time_per_output_token_seconds"
    after = parse_metrics(hist(tpot, [("0.005", 0), ("0.01", 100), ("0.025", 100), ("+Inf", 100)], 0.62))
    lines = breakdown_lines(latency_breakdown([LoadCounters("http://s/metrics", {}, after)], CLIENT))
    row = next(line for line in lines if line.strip().startswith("engine TPOT"))
    assert row.split()[2:4] == ["6.2", "5-10"]  # the mean (exact), then the bucket: no interpolated "7.5"
    assert not any("interpolat" in line for line in lines)


def test_each_server_is_compared_with_the_requests_it_answered() -> None:
    """Two replicas, one twice as slow per token: each one's engine TPOT against the client's TPOT over the requests
    it answered, not against the whole client's mean (which read "client 0.44x" for a replica that was not)."""
    fast = rec(1.0, [100, 110, 120, 130], 4, host="a:8000")  # TPOT 10 ms
    slow = rec(2.0, [100, 130, 160, 190], 4, host="b:8000")  # TPOT 30 ms
    c = columns_from_records([fast, fast, slow, slow])
    urls = ("http://a:8000/metrics", "http://b:8000/metrics")
    assert [url_rows(c, u).tolist() for u in urls] == [[0, 1], [2, 3]]
    assert url_rows(c, "http://router:9000/metrics").tolist() == []  # no request went there
    assert url_rows(columns_from_records([rec(1.0, [100], 1)]), urls[0]) is None  # one endpoint: cannot tell
    engine_tpot = [0.01, 0.03]  # each engine's TPOT is its client's: a ratio of 1.00 on both
    loads = [
        LoadCounters(u, {}, parse_metrics(hist(REQ_TPOT, [("0.05", 2), ("+Inf", 2)], 2 * t)))
        for u, t in zip(urls, engine_tpot, strict=True)
    ]
    whole = client_latency(c, None)
    own = [client_latency(c, None, url_rows(c, u)) for u in urls]
    block = latency_breakdown(loads, whole, own)
    assert [s["tpot"]["client_over_engine"] for s in block["servers"]] == pytest.approx([1.0, 1.0])
    assert [s["client"]["requests"] for s in block["servers"]] == [2, 2]
    assert block["combined"]["tpot"]["client_over_engine"] == pytest.approx(1.0)  # 20 ms over 20 ms
    lines = breakdown_lines(block)
    assert sum("client 1.00x" in line for line in lines) == 3 and "its 2 requests: TPOT" in "\n".join(lines)
    # several URLs whose requests the records cannot tell apart: no ratio, rather than one over the wrong requests
    blind = latency_breakdown(loads, whole)
    assert all("client_over_engine" not in s["tpot"] and "client" not in s for s in blind["servers"])
    assert "which requests it answered is unknown" in "\n".join(breakdown_lines(blind))


def test_a_replica_url_takes_the_requests_that_replica_answered() -> None:
    recs = [rec(1.0 + k, [100, 110], 2, replica=str(k % 3)) for k in range(6)]
    c = columns_from_records(recs)
    assert url_rows(c, "http://s:8000/metrics?replica=1").tolist() == [1, 4]
    assert url_rows(c, "http://s:8000/metrics?replica=7").tolist() == []
    assert url_rows(c, "http://s:8000/metrics") is None  # the whole server's page: not one replica's share
    assert url_rows(c, "http://s:8000/metrics", "http://s:8000").tolist() == list(
        range(6)
    )  # the one --host's
    assert url_rows(c, "http://t:8000/metrics", "http://s:8000") is None  # another server's page
    assert url_rows(c, "http://s:8000/metrics?replica=2", "http://s:8000").tolist() == [2, 5]
    no_header = columns_from_records([rec(1.0, [100, 110], 2)])
    assert url_rows(no_header, "http://s:8000/metrics?replica=1") is None
