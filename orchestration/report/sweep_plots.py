"""The figures of a sweep and of an SLO search (`--find-max-rate`): the search's one figure of the answer (each
tried rate's SLO metric against the SLO line, the maximum marked), the latency curves against the achieved rate
(with the SLO line and the answer where there is an SLO) and the Pareto view. Every axis of a latency, a
throughput or a rate starts at zero (plots.from_zero): a 2 % spread between steps reads as 2 %."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure

from orchestration.report.plots import Plot, from_zero
from orchestration.report.sweep_answer import number
from vllm_users.measure import metric_keys as K
from vllm_users.measure.metric_keys import percentile_name

__all__ = ["curves_figure", "number", "pareto_figure", "search_figure", "slo_value"]

CURVES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2EL"))
SLO_COLOR, ANSWER_COLOR = "tab:red", "tab:green"
# how each verdict of a step is drawn: marker, colour
VERDICT_STYLE = {"holds": ("o", "tab:green"), "fails": ("X", "tab:red"), "invalid": ("s", "0.55")}


def slo_value(step: Mapping[str, Any], metric: str, pname: str) -> float | None:
    """A step's `metric` at the SLO percentile `pname`: its judgement's (measured window), else its row's."""
    v = number(((step.get("judgement") or {}).get("slo_values_ms") or {}).get(metric))
    return v if v is not None else number(step.get(f"{metric}_{pname}_ms"))


def _points(steps: Sequence[Mapping[str, Any]], x: str, y: str) -> tuple[list[float], list[float]]:
    pts = sorted(
        (xv, yv)
        for s in steps
        if (xv := number(s.get(x))) is not None and (yv := number(s.get(y))) is not None
    )
    return [p[0] for p in pts], [p[1] for p in pts]


def _slo_line(ax: Any, limit: float, pname: str) -> None:
    ax.axhline(limit, color=SLO_COLOR, ls="--", lw=1.2, label=f"SLO: {pname} <= {limit:g} ms")


def curves_figure(
    steps: Sequence[Mapping[str, Any]],
    slo_ms: Mapping[str, float] | None = None,
    percentile: float = 99.0,
    answer: tuple[float, str] | None = None,
) -> Plot | None:
    """TTFT/TPOT/E2EL p50 and p99 against the achieved request rate; with an SLO, its line on each of its
    metrics' panels (and the steps' values at the SLO percentile where that is neither p50 nor p99), and the
    answer to the question (`answer`: its achieved rate and its legend) as a vertical line on every panel."""
    if not any(number(s.get("achieved_rate")) is not None for s in steps):
        return None
    slo_ms = slo_ms or {}
    pname = percentile_name(percentile)
    fig = Figure(figsize=(12, 3.6))
    for i, (m, title) in enumerate(CURVES):
        ax = fig.add_subplot(1, 3, i + 1)
        for stat, style in (("p50", "o-"), ("p99", "s--")):
            xs, ys = _points(steps, "achieved_rate", f"{m}_{stat}_ms")
            if xs:
                ax.plot(xs, ys, style, label=f"{title} {stat}", ms=4)
        limit = number(slo_ms.get(m))
        if limit is not None:
            if pname not in ("p50", "p99"):
                pts = sorted(
                    (x, y)
                    for s in steps
                    if (x := number(s.get("achieved_rate"))) is not None
                    and (y := slo_value(s, m, pname)) is not None
                )
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], "^-", ms=4, label=f"{title} {pname}")
            _slo_line(ax, limit, pname)
        if answer is not None:
            ax.axvline(answer[0], color=ANSWER_COLOR, lw=1.5, label=answer[1])
        from_zero(ax, "y", [limit] if limit is not None else [])
        from_zero(ax, "x")
        ax.set_xlabel("achieved request rate (req/s)")
        ax.set_ylabel("ms")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return Plot("latency-vs-rate", "Latency against the achieved request rate", fig)


def pareto_figure(steps: Sequence[Mapping[str, Any]]) -> Plot | None:
    """A user's output tok/s (1000 / median TPOT) against total output tok/s, one point per step."""
    xs, ys = _points(steps, K.OUTPUT_THROUGHPUT, "output_tok_per_s_per_user")
    if not xs:
        return None
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(xs, ys, "o-")
    for s in steps:
        x, y = number(s.get(K.OUTPUT_THROUGHPUT)), number(s.get("output_tok_per_s_per_user"))
        if x is not None and y is not None:
            label = s.get("kind") if s.get("target") is None else f"{s['target']:g}"
            ax.annotate(str(label), (x, y), fontsize=7, textcoords="offset points", xytext=(4, 4))
    from_zero(ax, "y")
    from_zero(ax, "x")
    ax.set_xlabel("total output tok/s")
    ax.set_ylabel("output tok/s per user (1000 / median TPOT)")
    ax.set_title("Throughput against interactivity (Pareto)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return Plot("pareto", "Per-user tok/s against total tok/s", fig)


def search_figure(doc: Mapping[str, Any]) -> Plot | None:
    """The SLO search in one figure: each tried rate's SLO metric at the SLO percentile (one panel per SLO
    metric; TTFT when the SLOs are the traffic classes' own), marked by its verdict and numbered in the order
    tried, the SLO line, the maximum rate within the SLO, the bracket it lies in and the probe's throughput."""
    steps = [s for s in doc.get("steps") or [] if number(s.get("target")) is not None]
    if not steps:
        return None
    pname = percentile_name(float(doc.get("slo_percentile") or 99.0))
    slo_ms = doc.get("slo_ms") or {}
    metrics = [m for m, _t in CURVES if m in slo_ms] or ["ttft"]
    lo, hi = number(doc.get("max_rate")), number(doc.get("lowest_failing_rate"))
    probe = number(doc.get("probe_capacity_rps"))
    fig = Figure(figsize=(8.5 if len(metrics) == 1 else 6.5 * len(metrics), 4.5))
    for i, m in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), i + 1)
        tried = sorted(
            (x, y)
            for s in steps
            if (x := number(s["target"])) is not None and (y := slo_value(s, m, pname)) is not None
        )
        if tried:  # the curve the search walked on, in rate order
            ax.plot([p[0] for p in tried], [p[1] for p in tried], "-", color="0.7", lw=1, zorder=1)
        for verdict, (marker, color) in VERDICT_STYLE.items():
            pts = [
                (float(s["target"]), y)
                for s in steps
                if s.get("verdict") == verdict and (y := slo_value(s, m, pname)) is not None
            ]
            if pts:
                ax.scatter(
                    [x for x, _ in pts],
                    [y for _, y in pts],
                    marker=marker,
                    color=color,
                    s=50,
                    zorder=3,
                    label=f"{verdict} ({len(pts)})",
                )
        for number_tried, s in enumerate(doc.get("steps") or [], 1):
            y = slo_value(s, m, pname)
            if number(s.get("target")) is not None and y is not None:
                ax.annotate(
                    str(number_tried), (s["target"], y), fontsize=7, textcoords="offset points", xytext=(5, 4)
                )
        limit = number(slo_ms.get(m))
        if limit is not None:
            _slo_line(ax, limit, pname)
        if lo is not None and hi is not None:
            ax.axvspan(lo, hi, color=ANSWER_COLOR, alpha=0.08, label=f"search resolution [{lo:g}, {hi:g})")
        if lo is not None:
            ax.axvline(lo, color=ANSWER_COLOR, lw=2, label=f"max rate within the SLO: {lo:g} req/s")
        if probe is not None:
            ax.axvline(probe, color="0.4", ls=":", lw=1.2, label=f"probe's throughput: {probe:.4g} req/s")
        from_zero(ax, "y", [limit] if limit is not None else [])
        from_zero(ax, "x", [v for v in (lo, hi, probe) if v is not None])
        title = dict(CURVES)[m]
        ax.set_xlabel("tried rate (req/s)")
        ax.set_ylabel(f"{title} {pname} (ms)")
        ax.set_title(
            f"{title} {pname} at each tried rate (marker: the step's verdict on every SLO)", fontsize=9
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    answer = f"{lo:g} req/s" if lo is not None else "no tried rate held"
    fig.tight_layout()
    return Plot("max-rate", f"Max rate within the SLO: {answer}", fig)
