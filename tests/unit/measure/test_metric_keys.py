"""The metric keys' declaration (vllm_users/measure/metric_keys.py) against what result_fields writes, and the
API names and error kinds (vllm_users/measure/kinds.py) against the client's own spellings."""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.measure.helpers import rand_records, rec
from vllm_users.client import responses as R
from vllm_users.measure import metric_keys as K
from vllm_users.measure.kinds import APIS, ERROR_KINDS, POOLING_ENDPOINTS
from vllm_users.measure.metrics import Slo
from vllm_users.measure.record import RequestRecord
from vllm_users.measure.result_fields import build_metrics, compute_metrics
from vllm_users.measure.windows import parse_optional

REPO = Path(__file__).resolve().parents[3]


def _pooling(n: int, t0: float = 1_700_000_000.0) -> list[RequestRecord]:
    """Pooling answers as record_from_stream makes them: one "chunk" (the end), no output tokens, not streamed."""
    return [
        rec(t0 + i * 0.01, [5.0 + i], None, endpoint=POOLING_ENDPOINTS[i % 3], not_streamed=True)
        for i in range(n)
    ]


def _every_kind() -> list[RequestRecord]:
    """Records that make every optional key appear: errors, open loop, reasoning, images, [DONE]-less and
    compressed streams, non-streamed and pooling answers, validity, sessions."""
    out = rand_records(200, 3, open_loop=True, scenarios=("chat", "json"))
    t = out[-1].t_start + 0.01
    for i in range(20):
        r = rec(
            t + i * 0.01,
            [10.0, 12.0, 15.0, 30.0, 31.0],
            5,
            answer_us=15_000,
            reasoning_tokens=2,
            reasoning_estimated=i % 2 == 0,
            images=1,
            image_tokens=40,
            scenario="vision",
            extra={"no_done": True, "content_encoding": "gzip"},
        )
        out.append(r)
    out += [rec(t + 0.5 + i * 0.01, [40.0], 7, not_streamed=True, scenario="plain") for i in range(5)]
    return out + _pooling(6, t + 0.7)


def test_every_key_metrics_summary_writes_is_declared() -> None:
    slo = Slo.parse(["ttft:50 tpot:20 e2el:900 valid"])
    res, scen, _, _ = build_metrics(
        _every_kind(),
        slo=slo,
        percentiles=(50, 90, 99, 99.9),
        percentile_metrics=("ttft", "tpot", "itl", "e2el"),
        warmup=parse_optional("5r"),
    )
    for k in (
        K.MISSING_DONE_REQUESTS,
        K.COMPRESSED_STREAMS,
        K.POOLING_REQUESTS,
        K.TOTAL_REASONING_TOKENS,
        K.MEAN_IMAGE_TOKENS_PER_REQUEST,
        K.INPUT_THROUGHPUT,
        K.WINDOWS,
        K.GOODPUT,
        K.ERROR_MESSAGES,
        K.TTFA.key("mean"),
        K.percentile_key(99.9, "answer_tpot"),
        K.percentile_key(50, "e2el"),
    ):
        assert k in res, k  # the records above reach every optional key, so the check below covers them
    undeclared = [k for r in (res, *scen.values()) for k in r if K.declared(k) is None]
    assert not undeclared


def test_a_pooling_result_carries_no_figure_that_does_not_apply() -> None:
    res = compute_metrics(_pooling(9), percentiles=(50, 99))
    for k, v in res.items():
        key = K.declared(k)
        assert key is not None, k
        if "pooling" not in key.applies_to:
            assert v is None, f"{k} = {v!r}: does not apply to pooling requests (absent or None, never 0)"
    streaming = [k for k in res if K.declared(k).applies_to == K.STREAMED]  # type: ignore[union-attr]
    assert not streaming  # TTFT/ITL/TPOT and their percentiles: absent
    assert res[K.TOTAL_OUTPUT_TOKENS] is None and res[K.OUTPUT_THROUGHPUT] is None
    assert res[K.INPUT_THROUGHPUT] > 0 and res[K.E2EL.key("mean")] > 0 and K.percentile_key(99, "e2el") in res


def test_a_non_streamed_result_has_no_streaming_latency() -> None:
    res = compute_metrics([rec(1.0 + i, [30.0 + i], 8, not_streamed=True) for i in range(5)])
    assert [
        k for k, v in res.items() if "not_streamed" not in K.declared(k).applies_to and v is not None
    ] == []  # type: ignore[union-attr]
    assert not [m for m in (K.TTFT, K.TPOT, K.ITL) if m.key("mean") in res]
    assert res[K.TOTAL_OUTPUT_TOKENS] == 40  # generative: its output figures apply


def test_the_latency_family_is_made_from_the_declaration() -> None:
    assert K.percentile_key(99, "ttft") == "p99_ttft_ms"
    assert K.percentile_key(99.9, "e2el") == "p99.9_e2el_ms"
    assert K.TPOT.key("median") == "median_tpot_ms"
    keys = ["p99_tpot_ms", "p99_answer_tpot_ms", "p99.9_tpot_ms", "mean_tpot_ms", "px_tpot_ms"]
    assert K.percentile_keys(keys, "tpot") == [("p99_tpot_ms", "99"), ("p99.9_tpot_ms", "99.9")]
    assert K.declared("p99_answer_tpot_ms") == K.Key(
        "p99_answer_tpot_ms", "ms", K.STREAMED, "P99 ANSWER TPOT (ms)", ".2f", better="lower"
    )
    assert K.declared("median_e2el_ms").applies_to == K.ALL  # type: ignore[union-attr]
    assert (
        K.declared("max_ttft_ms") is None and K.declared("mean_foo_ms") is None and K.declared("nope") is None
    )
    out = K.declared(K.OUTPUT_THROUGHPUT)
    assert out is not None and (out.name, out.unit, out.applies_to) == (
        "output_throughput",
        "tok/s",
        K.GENERATIVE,
    )
    assert (out.label, out.fmt, out.better) == ("Output token throughput (tok/s)", ".2f", "higher")
    assert K.better(K.COMPLETED) is None and K.better("p99.9_itl_ms") == "lower" and K.better("nope") is None


def test_the_clients_spellings_are_the_declared_ones() -> None:
    """client/ imports nothing of measure/: its API names and the error kinds it sets are plain strings, held
    here against kinds.py (a kind the client set that is not declared would reach records untyped)."""
    assert tuple(R.APIS) == APIS and R.POOLING == POOLING_ENDPOINTS
    set_kinds: set[str] = set()
    for path in (
        *(REPO / "vllm_users" / "client").glob("*.py"),
        *(REPO / "vllm_users" / "scenarios").glob("*.py"),
    ):
        for line in path.read_text().splitlines():
            m = re.search(r"\.error\b(?:, [\w.]+)? = (.+)$", line) or re.search(r'^\s*return ("\w+", )', line)
            if m:
                set_kinds.update(re.findall(r'"([a-z_]+)"', m.group(1)))
    assert {
        "truncated",
        "bad_response",
        "inband_error",
        "http",
        "timeout",
    } <= set_kinds  # the scan finds them
    assert set_kinds <= set(ERROR_KINDS), set_kinds - set(ERROR_KINDS)


def test_every_declared_row_has_what_its_renderers_read() -> None:
    """A row in the report needs a label and a format, a printed line a console label, a compared one a row;
    rows have distinct places; the latency rows sit between the head and the tail."""
    for k in K.DECLARED.values():
        if k.row is not None:
            assert k.label and k.fmt and k.row != K.LATENCY_ROW, k.name
        assert not k.compared or k.row is not None, k.name
        assert not k.listed or k.console, k.name
        assert k.better in (None, "higher", "lower"), k.name
    places = [k.row for k in K.DECLARED.values() if k.row is not None]
    assert len(places) == len(set(places))
    head, tail = K.rows()
    assert [k.name for k in head][:3] == [K.COMPLETED, K.FAILED, K.DURATION]
    assert all(k.row is not None and k.row > K.LATENCY_ROW for k in tail)
    assert set(K.rows(compared=True)[0]) <= set(head)


def test_a_latency_statistic_is_labelled_from_its_declaration() -> None:
    assert K.TTFT.stat_label("mean") == "Mean TTFT (ms)"
    assert K.ANSWER_TPOT.stat_label("p99.9") == "P99.9 Answer TPOT (ms)"
    assert K.REASONING_TPOT.stat_label("median", upper=True) == "Median REASONING TPOT (ms)"
    assert K.declared("p90_itl_ms").label == "P90 ITL (ms)"  # type: ignore[union-attr]
    assert (K.TTFT.p(99.9), K.E2EL.step(99)) == ("p99.9_ttft_ms", "e2el_p99_ms")
    steps = dict(K.STEP_FIELDS)
    assert steps[K.REQUEST_THROUGHPUT] == "achieved_rate" and steps["median_tpot_ms"] == "tpot_p50_ms"
