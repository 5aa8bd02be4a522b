"""The console summary's fleet sections: per endpoint (several --host URLs) and per replica (--replica-header),
each row's share, latency, throughput, goodput and errors, then how uneven the fleet was."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_users.measure import metric_keys as K

__all__ = ["fleet_lines"]

_W = 50  # the summary's width (orchestration/report/summary.py)


def _ms(v: Any) -> str:
    return "n/a" if v is None else f"{v:.1f}"


def _ratio(v: Any) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def _section(title: str, what: str, block: Mapping[str, Any]) -> list[str]:
    groups: Mapping[str, Mapping[str, Any]] = block.get("groups") or {}
    slo = any("good" in m for m in groups.values())
    width = max([len(what), *(len(n) for n in groups)])
    out = [
        f"{f' {title} ':-^{_W}}",
        f"{what:<{width}} {'share':>5} {'ok':>6} {'fail':>4} {'req/s':>7} {'tok/s':>8} {'TTFT p50/p99 ms':>17} "
        f"{'TPOT p50/p99':>13} {'ITL p99':>8} {'E2EL p99':>9}" + (f" {'goodput':>8}" if slo else ""),
    ]
    for name, m in groups.items():
        ttft = f"{_ms(m.get(K.TTFT.key('median')))}/{_ms(m.get(K.percentile_key(99, 'ttft')))}"
        tpot = f"{_ms(m.get(K.TPOT.key('median')))}/{_ms(m.get(K.percentile_key(99, 'tpot')))}"
        row = (
            f"{name:<{width}} {m['request_share']:>5.0%} {m[K.COMPLETED]:>6} {m[K.FAILED]:>4} "
            f"{m[K.REQUEST_THROUGHPUT]:>7.2f} {_ms(m.get(K.OUTPUT_THROUGHPUT)):>8} {ttft:>17} {tpot:>13} "
            f"{_ms(m.get(K.percentile_key(99, 'itl'))):>8} {_ms(m.get(K.percentile_key(99, 'e2el'))):>9}"
        )
        if slo:
            row += f" {m['request_goodput']:>8.2f}" if "request_goodput" in m else f" {'n/a':>8}"
        errors = m.get("errors_by_kind") or {}
        if errors:
            row += "  errors: " + ", ".join(f"{k} {v}" for k, v in errors.items())
        out.append(row)
    imb = block.get("imbalance") or {}
    line = (
        f"imbalance: request share max/min {_ratio(imb.get('request_share_max_over_min'))}"
        f" ({imb.get('request_share_max', '-')} / {imb.get('request_share_min', '-')}), "
        f"median TTFT max/min {_ratio(imb.get('median_ttft_max_over_min'))}"
        f" ({imb.get('median_ttft_max', '-')} / {imb.get('median_ttft_min', '-')})"
    )
    out.append(line)
    if imb.get("idle"):
        out.append(f"completed nothing: {', '.join(imb['idle'])}")
    if block.get("unnamed"):
        out.append(f"requests whose answer named no {what}: {block['unnamed']}")
    return out


def fleet_lines(per_endpoint: Mapping[str, Any] | None, per_replica: Mapping[str, Any] | None) -> list[str]:
    """The per-endpoint and per-replica sections (nothing for a run against one server)."""
    out: list[str] = []
    if per_endpoint:
        out += _section("Per endpoint", "endpoint", per_endpoint)
    if per_replica:
        out += _section("Per replica", "replica", per_replica)
    return out
