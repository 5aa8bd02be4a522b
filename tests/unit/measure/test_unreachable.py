"""Server-unreachable stretches on labelled runs: a server killed (a stretch to the end), one that comes back (a
stretch that ends), and no false alarm for scattered resets, a short blip or other failure kinds."""

from __future__ import annotations

from tests.unit.measure.helpers import rec
from vllm_users.measure import metric_keys as K
from vllm_users.measure.columns import as_columns
from vllm_users.measure.result_fields import compute_metrics

T0 = 1000.0


def _ok(t: float):
    return rec(T0 + t, [10, 20], out=2)


def _refused(t: float, kind: str = "connection"):
    return rec(T0 + t, [], out=None, error=kind, error_detail="ConnectionRefusedError", end_us=1000)


def _spans(records):
    return compute_metrics(as_columns(records)).get(K.SERVER_UNREACHABLE)


def test_a_killed_server_is_one_stretch_to_the_end() -> None:
    records = [_ok(i * 0.1) for i in range(10)] + [_refused(1.0 + i * 0.25) for i in range(12)]
    assert _spans(records) == [{"from_s": 1.0, "for_s": 2.751, "failures": 12, "to_end": True}]


def test_a_server_that_comes_back_ends_its_stretch() -> None:
    records = [_ok(0.0)] + [_refused(1.0 + i * 0.5) for i in range(5)] + [_ok(4.0), _ok(4.1)]
    assert _spans(records) == [{"from_s": 1.0, "for_s": 2.001, "failures": 5}]


def test_no_false_alarm_for_scattered_resets_a_blip_or_other_kinds() -> None:
    scattered = [r for i in range(20) for r in ((_refused(i * 0.5),) if i % 3 == 0 else (_ok(i * 0.5),))]
    assert _spans(scattered) is None  # each reset between successes
    blip = [_ok(0.0), _refused(0.5), _refused(0.7), _ok(1.0)]
    assert _spans(blip) is None  # 0.2 s: shorter than MIN_S
    http = [_ok(0.0)] + [_refused(1.0 + i * 0.5, kind="http") for i in range(10)]
    assert _spans(http) is None  # a server that answers 503 is reachable
    assert _spans([_ok(0.0), _ok(1.0)]) is None
