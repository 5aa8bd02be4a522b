"""The summary's tables of a run's groups of requests: per class, per model, per endpoint and per replica (with how
uneven the fleet was), and its sessions (what became of them, TTFT by turn), laid out like the rest of the
summary."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_users.measure import metric_keys as K

__all__ = [
    "TURNS_SHOWN",
    "WIDTH",
    "class_lines",
    "fleet_lines",
    "imbalance_line",
    "line",
    "model_lines",
    "ms",
    "session_lines",
    "turn_lines",
]

WIDTH = 50  # the summary's width: every section's title rule


def line(label: str, value: Any, fmt: str = "") -> str:
    """One labelled figure of the summary (n/a for a figure that is absent)."""
    if value is None:
        text = "n/a"
    elif fmt:
        text = format(value, fmt)
    else:
        text = str(value)
    return f"{label:<40}{text:<10}"


def ms(v: Any) -> str:
    """A figure in ms with one decimal, or n/a."""
    return "n/a" if v is None else f"{v:.1f}"


def class_lines(block: Mapping[str, Any] | None) -> list[str]:
    """Traffic classes: per class its weight against the capacity it got, latency, goodput against
    its own SLO; then Jain's fairness index (nothing for a run without classes)."""
    if not block:
        return []
    out = [
        f"{' Per class ':-^{WIDTH}}",
        f"{'class':<12} {'weight':>6} {'got':>5} {'ok':>6} {'fail':>4} {'tok/s':>8} {'TTFT p50/p99 ms':>17} "
        f"{'TPOT p99':>8} {'E2EL p99':>9} {'goodput':>8} {'good':>5}  SLO",
    ]
    for name, c in block["per_class"].items():
        slo = " ".join(f"{k}:{v:g}" for k, v in c["slo_ms"].items()) or "-"
        good = "n/a" if c["good_fraction"] is None else f"{c['good_fraction']:.0%}"
        ttft = f"{ms(c.get(K.TTFT.key('median')))}/{ms(c.get(K.percentile_key(99, 'ttft')))}"
        out.append(
            f"{name:<12} {c['weight_share']:>6.0%} {c['output_token_share']:>5.0%} {c[K.COMPLETED]:>6} "
            f"{c[K.FAILED]:>4} {ms(c.get(K.OUTPUT_THROUGHPUT)):>8} {ttft:>17} "
            f"{ms(c.get(K.percentile_key(99, 'tpot'))):>8} {ms(c.get(K.percentile_key(99, 'e2el'))):>9} {c[K.REQUEST_GOODPUT]:>8.2f} {good:>5}  {slo}"
        )
    j = block["fairness"]["jain_index"]
    out.append(line("Fairness (Jain, goodput/weight):", j, ".3f"))
    out.append(
        "(weight: share asked; got: share of output tokens; goodput: good req/s against the class's SLO)"
    )
    return out


def model_lines(block: Mapping[str, Any] | None) -> list[str]:
    """Several served models (a --model mix, classes' adapters): per model its requests, throughput, latency and,
    with --goodput, its goodput (nothing for a run that sent to one model)."""
    if not block:
        return []
    slo = any("good" in m for m in block.values())
    out = [
        f"{' Per model ':-^{WIDTH}}",
        f"{'model':<16} {'asked':>5} {'got':>5} {'ok':>6} {'fail':>4} {'tok/s':>8} {'TTFT p50/p99 ms':>17} "
        f"{'TPOT p50/p99':>13} {'ITL p99':>8} {'E2EL p99':>9}"
        + (f" {'goodput':>8} {'good':>5}" if slo else ""),
    ]
    for name, m in block.items():
        asked = f"{m['weight_share']:.0%}" if m.get("weight_share") is not None else "-"
        ttft = f"{ms(m.get(K.TTFT.key('median')))}/{ms(m.get(K.percentile_key(99, 'ttft')))}"
        tpot = f"{ms(m.get(K.TPOT.key('median')))}/{ms(m.get(K.percentile_key(99, 'tpot')))}"
        row = (
            f"{name:<16} {asked:>5} {m['request_share']:>5.0%} {m[K.COMPLETED]:>6} {m[K.FAILED]:>4} "
            f"{ms(m.get(K.OUTPUT_THROUGHPUT)):>8} {ttft:>17} {tpot:>13} "
            f"{ms(m.get(K.percentile_key(99, 'itl'))):>8} {ms(m.get(K.percentile_key(99, 'e2el'))):>9}"
        )
        if "good" in m:
            good = "n/a" if m["good_fraction"] is None else f"{m['good_fraction']:.0%}"
            row += f" {m[K.REQUEST_GOODPUT]:>8.2f} {good:>5}"
        out.append(row)
    out.append(
        "(asked: the mix's weight share; got: share of the completed requests; latency of the successes)"
    )
    return out


# the fleet sections: per endpoint (several --host URLs) and per replica (--replica-header)
def _ratio(v: Any) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def _fleet_section(title: str, what: str, block: Mapping[str, Any]) -> list[str]:
    groups: Mapping[str, Mapping[str, Any]] = block.get("groups") or {}
    slo = any("good" in m for m in groups.values())
    width = max([len(what), *(len(n) for n in groups)])
    out = [
        f"{f' {title} ':-^{WIDTH}}",
        f"{what:<{width}} {'share':>5} {'ok':>6} {'fail':>4} {'req/s':>7} {'tok/s':>8} {'TTFT p50/p99 ms':>17} "
        f"{'TPOT p50/p99':>13} {'ITL p99':>8} {'E2EL p99':>9}" + (f" {'goodput':>8}" if slo else ""),
    ]
    for name, m in groups.items():
        ttft = f"{ms(m.get(K.TTFT.key('median')))}/{ms(m.get(K.percentile_key(99, 'ttft')))}"
        tpot = f"{ms(m.get(K.TPOT.key('median')))}/{ms(m.get(K.percentile_key(99, 'tpot')))}"
        row = (
            f"{name:<{width}} {m['request_share']:>5.0%} {m[K.COMPLETED]:>6} {m[K.FAILED]:>4} "
            f"{m[K.REQUEST_THROUGHPUT]:>7.2f} {ms(m.get(K.OUTPUT_THROUGHPUT)):>8} {ttft:>17} {tpot:>13} "
            f"{ms(m.get(K.percentile_key(99, 'itl'))):>8} {ms(m.get(K.percentile_key(99, 'e2el'))):>9}"
        )
        if slo:
            row += f" {m[K.REQUEST_GOODPUT]:>8.2f}" if K.REQUEST_GOODPUT in m else f" {'n/a':>8}"
        errors = m.get(K.ERRORS_BY_KIND) or {}
        if errors:
            row += "  errors: " + ", ".join(f"{k} {v}" for k, v in errors.items())
        out.append(row)
    imb = block.get("imbalance") or {}
    out.append(imbalance_line(imb))
    if imb.get("idle"):
        out.append(f"completed nothing: {', '.join(imb['idle'])}")
    if block.get("unnamed"):
        out.append(f"requests whose answer named no {what}: {block['unnamed']}")
    return out


def imbalance_line(imb: Mapping[str, Any]) -> str:
    """How uneven a fleet was, in one line: the request shares' and median TTFTs' max/min, and whose."""
    return (
        f"imbalance: request share max/min {_ratio(imb.get('request_share_max_over_min'))}"
        f" ({imb.get('request_share_max', '-')} / {imb.get('request_share_min', '-')}), "
        f"median TTFT max/min {_ratio(imb.get('median_ttft_max_over_min'))}"
        f" ({imb.get('median_ttft_max', '-')} / {imb.get('median_ttft_min', '-')})"
    )


def fleet_lines(per_endpoint: Mapping[str, Any] | None, per_replica: Mapping[str, Any] | None) -> list[str]:
    """The per-endpoint and per-replica sections (nothing for a run against one server)."""
    out: list[str] = []
    if per_endpoint:
        out += _fleet_section("Per endpoint", "endpoint", per_endpoint)
    if per_replica:
        out += _fleet_section("Per replica", "replica", per_replica)
    return out


def session_lines(sessions: Mapping[str, Any] | None) -> list[str]:
    """Session graphs' figures: completed, cut and failed of all, calls per session, completed sessions'
    duration; nothing for a run without them."""
    if not sessions:
        return []
    out = [
        line(
            "Sessions completed / cut / failed:",
            f"{sessions['completed']} / {sessions['cut']} / {sessions['failed']} of {sessions['sessions']}",
        )
    ]
    calls = sessions.get("calls_per_session")
    if calls:
        out.append(line("Calls per session mean / max:", f"{calls['mean']:.1f} / {calls['max']}"))
    dur = sessions.get("duration_s")
    if dur:
        out.append(line("Session duration p50 / p99 (s):", f"{dur['p50']:.2f} / {dur['p99']:.2f}"))
    return out


TURNS_SHOWN = 6  # the summary's turns of ttft_by_turn: the first ones and the last (the report has them all)


def turn_lines(turns: Mapping[str, Any] | None, cached_reported: bool = False) -> list[str]:
    """Sessions' TTFT p50 by turn index (ms) and, where the server reported cached tokens, the cached fraction
    of each turn's prompts: the first turns and the last; nothing for a run without sessions."""
    if not turns:
        return []
    keys = sorted(turns, key=int)
    shown = keys if len(keys) <= TURNS_SHOWN else [*keys[: TURNS_SHOWN - 1], keys[-1]]
    ttft, cached = [], []
    for k in shown:
        p50 = (turns[k].get("ttft_ms") or {}).get("p50")
        frac = turns[k].get("cached_fraction")
        gap = "... " if k == keys[-1] and len(keys) > TURNS_SHOWN else ""
        ttft.append(f"{gap}{k}: " + ("n/a" if p50 is None else f"{p50:.1f}"))
        cached.append(f"{gap}{k}: " + ("n/a" if frac is None else f"{frac:.0%}"))
    out = [line("TTFT p50 by turn (ms):", " ".join(ttft))]
    if cached_reported:  # else the server said nothing of its cache: no share, not 0 %
        out.append(line("Cached prompt share by turn:", " ".join(cached)))
    return out
