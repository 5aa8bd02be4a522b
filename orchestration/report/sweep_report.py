"""The combined report of a sweep (or an SLO search): the answer first (the search's maximum rate, a sweep's highest
rate within its SLO or its peak), the search's figure of it, the table of steps (without the columns no step has a
value for), the latency curves against the achieved rate and the Pareto view (a user's tok/s against total tok/s);
HTML (self-contained), Markdown and JSON. The figures are orchestration.report.sweep_plots."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import jinja2

from orchestration.report.model import fmt
from orchestration.report.plots import Plot
from orchestration.report.run_sets import load_sweep, search_headline
from orchestration.report.sweep_answer import slo_answer, sweep_headline
from orchestration.report.sweep_plots import curves_figure, number, pareto_figure, search_figure
from vllm_users.atomic import atomic_json, write_atomic
from vllm_users.measure import metric_keys as K
from vllm_users.run_dir import REPORT_DIR, REPORT_HTML, REPORT_JSON, REPORT_MD, REPORT_PDF

__all__ = [
    "TABLE",
    "columns",
    "curves_figure",
    "figures",
    "pareto_figure",
    "render_markdown",
    "rewrite_report",
    "search_figure",
    "slo_answer",
    "sweep_headline",
    "write_sweep_report",
]

TABLE = (
    ("label", "step", "s"),
    ("startup_s", "startup s", ".1f"),
    ("target", "target", ".4g"),
    ("achieved_rate", "req/s", ".3g"),
    (K.OUTPUT_THROUGHPUT, "out tok/s", ".1f"),
    ("ttft_p50_ms", "TTFT p50", ".1f"),
    ("ttft_p99_ms", "TTFT p99", ".1f"),
    ("tpot_p50_ms", "TPOT p50", ".2f"),
    ("tpot_p99_ms", "TPOT p99", ".2f"),
    ("e2el_p50_ms", "E2EL p50", ".1f"),
    ("e2el_p99_ms", "E2EL p99", ".1f"),
    ("output_tok_per_s_per_user", "tok/s/user", ".1f"),
    ("scaling_efficiency", "efficiency", ".2f"),
    ("failed", K.FAILED, "d"),
    ("usd_per_million_output_tokens", "$/1M out tok", ".4g"),
    ("why", "verdict", "s"),
)

_HTML = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>vllm-locust {{ title }}</title>
<style>body{font-family:system-ui,sans-serif;margin:24px;max-width:1200px;color:#1b1f23}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f6f8fa}td.l,th.l{text-align:left}td.n{white-space:nowrap}img{max-width:100%}
.small{font-size:12px;color:#57606a}.box{border-left:4px solid #0969da;background:#ddf4ff;padding:8px 12px}
</style></head><body>
<h1>vllm-locust {{ title }}</h1><p class="small">{{ doc.sweep or "" }} against {{ doc.host }}; {{ doc.steps|length }} step(s)</p>
{% for line in headline %}<div class="box">{{ line }}</div>{% endfor %}
{% macro figure(p) %}<figure id="plot-{{ p.key }}"><figcaption><b>{{ p.title }}</b></figcaption>
<img alt="{{ p.title }}" src="data:image/png;base64,{{ p.png_base64() }}"></figure>{% endmacro %}
{% for p in lead %}{{ figure(p) }}{% endfor %}
<h2>Steps</h2><table id="steps"><tr>{% for _k, label, spec in table %}<th{% if spec == "s" %} class="l"{% endif %}>{{ label }}</th>{% endfor %}<th class="l">run</th></tr>
{% for s in rows %}<tr>{% for k, _l, spec in table %}<td{% if spec == "s" %} class="l{% if loop.first %} n{% endif %}"{% endif %}>{{ fmt(s.get(k), spec) }}</td>{% endfor %}
<td class="l n">{{ s.name }}</td></tr>{% endfor %}</table>
{% for p in plots %}{{ figure(p) }}{% endfor %}
</body></html>"""


def _why(s: dict[str, Any]) -> str | None:
    """A step's verdict with every reason it failed (a server sweep's failed start: its error)."""
    v = s.get("verdict")
    reasons = list((s.get("judgement") or {}).get("reasons") or [])
    if s.get("error"):
        reasons.append(str(s["error"]))
    if v in ("fails", "invalid", "failed start") and reasons:
        return f"{v}: " + "; ".join(reasons)
    return str(v) if v else None


def _rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [{**s, "why": _why(s)} for s in doc.get("steps") or []]


def columns(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """TABLE without the columns that no step has a value for (a number that does not apply is absent: a column
    of n/a says nothing)."""
    return [c for c in TABLE if any(s.get(c[0]) is not None for s in rows)]


def render_markdown(doc: dict[str, Any], title: str, headline: Sequence[str]) -> str:
    """The steps as a Markdown table (without the columns no step has a value for)."""
    rows = _rows(doc)
    table = columns(rows)
    out = [f"## vllm-locust {title}", "", *[f"**{h}**" for h in headline], ""]
    out.append("| " + " | ".join(label for _k, label, _s in table) + " |")
    out.append("|" + "---|" * len(table))
    for s in rows:
        out.append("| " + " | ".join(fmt(s.get(k), spec) for k, _l, spec in table) + " |")
    return "\n".join(out) + "\n"


def _answer(doc: dict[str, Any]) -> tuple[float, str] | None:
    """The achieved request rate of the step that answers the question, and its legend (the latency curves mark
    it): a search's step at its maximum, a sweep's highest step within its SLO."""
    if doc.get("kind") == "max_rate_search":
        held = [
            s
            for s in doc.get("steps") or []
            if s.get("verdict") == "holds" and s.get("target") == doc.get("max_rate")
        ]
        x = number(held[-1].get("achieved_rate")) if held else None
        return (
            (x, f"the max rate's step ({doc['max_rate']:g} tried): {x:.3g} achieved")
            if x is not None
            else None
        )
    best, _ = slo_answer(doc)
    x = number(best.get("achieved_rate")) if best else None
    return (x, f"heaviest step within the SLO: {x:.3g} req/s") if x is not None else None


def figures(doc: dict[str, Any]) -> tuple[list[Plot], list[Plot]]:
    """(the figure of the answer, shown before the table: a search's; the others: the curves and Pareto)."""
    steps = doc.get("steps") or []
    lead = [search_figure(doc)] if doc.get("kind") == "max_rate_search" else []
    curves = curves_figure(steps, doc.get("slo_ms"), float(doc.get("slo_percentile") or 99.0), _answer(doc))
    return [p for p in lead if p is not None], [p for p in (curves, pareto_figure(steps)) if p is not None]


DEFAULT_FORMATS = ("html", "json", "md")


def write_sweep_report(
    path: str,
    doc: dict[str, Any] | None = None,
    *,
    title: str = "",
    headline: Sequence[str] | None = None,
    formats: Sequence[str] = DEFAULT_FORMATS,
) -> str:
    """Write PATH/report/report.{html,md,json,pdf} (those in `formats`) for the sweep (or SLO search) in PATH;
    returns the first written, the HTML when asked for. The title and the headline (the answer) follow the
    document's kind unless given."""
    if doc is None:
        doc = load_sweep(path)
    search = doc.get("kind") == "max_rate_search"
    title = title or ("SLO search (--find-max-rate)" if search else "sweep")
    if headline is None:
        headline = search_headline(doc) if search else sweep_headline(doc)
    out = os.path.join(path, REPORT_DIR)
    os.makedirs(out, exist_ok=True)
    lead, plots = figures(doc)
    rows = _rows(doc)
    env = jinja2.Environment(autoescape=True)
    written: list[str] = []
    subtitle = f"{doc.get('sweep') or ''} against {doc.get('host')}; {len(doc.get('steps') or [])} step(s)"
    if "html" in formats:
        html = env.from_string(_HTML).render(
            doc=doc,
            rows=rows,
            lead=lead,
            plots=plots,
            table=columns(rows),
            fmt=fmt,
            title=title,
            headline=headline,
        )
        written.append(os.path.join(out, REPORT_HTML))
        write_atomic(written[-1], html)
    if "md" in formats:
        written.append(os.path.join(out, REPORT_MD))
        write_atomic(written[-1], render_markdown(doc, title, headline))
    if "json" in formats:
        written.append(os.path.join(out, REPORT_JSON))
        atomic_json(written[-1], {"tool": "vllm-locust report", "kind": title, **doc})
    if "pdf" in formats:  # imported only then: ReportLab costs what an HTML report need not
        from orchestration.report.render_pdf import write_sweep_pdf

        written.append(os.path.join(out, REPORT_PDF))
        write_sweep_pdf(written[-1], title, subtitle, headline, columns(rows), rows, [*lead, *plots])
    return written[0]


def rewrite_report(path: str, formats: Sequence[str] = DEFAULT_FORMATS) -> str:
    """The report of a sweep or SLO-search directory, from its sweep.json, in `formats`."""
    return write_sweep_report(path, formats=formats)
