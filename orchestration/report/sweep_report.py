"""The combined report of a sweep (or an SLO search): latency curves against the achieved rate, the Pareto view
(a user's tok/s against total tok/s), and the table of steps; HTML (self-contained), Markdown and JSON."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import jinja2
from matplotlib.figure import Figure

from orchestration.report.model import fmt
from orchestration.report.plots import Plot
from orchestration.report.run_sets import load_sweep, search_headline
from vllm_users.atomic import atomic_json, write_atomic
from vllm_users.run_dir import REPORT_DIR, REPORT_HTML, REPORT_JSON, REPORT_MD

__all__ = ["curves_figure", "pareto_figure", "render_markdown", "rewrite_report", "write_sweep_report"]

CURVES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2EL"))
TABLE = (
    ("label", "step", "s"),
    ("startup_s", "startup s", ".1f"),
    ("target", "target", ".4g"),
    ("achieved_rate", "req/s", ".3g"),
    ("output_throughput", "out tok/s", ".1f"),
    ("ttft_p50_ms", "TTFT p50", ".1f"),
    ("ttft_p99_ms", "TTFT p99", ".1f"),
    ("tpot_p50_ms", "TPOT p50", ".2f"),
    ("tpot_p99_ms", "TPOT p99", ".2f"),
    ("e2el_p50_ms", "E2EL p50", ".1f"),
    ("e2el_p99_ms", "E2EL p99", ".1f"),
    ("output_tok_per_s_per_user", "tok/s/user", ".1f"),
    ("failed", "failed", "d"),
    ("usd_per_million_output_tokens", "$/1M out tok", ".4g"),
    ("verdict", "verdict", "s"),
)

_HTML = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>vllm-locust {{ title }}</title>
<style>body{font-family:system-ui,sans-serif;margin:24px;max-width:1200px;color:#1b1f23}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f6f8fa}td.l{text-align:left}img{max-width:100%}.small{font-size:12px;color:#57606a}
.box{border-left:4px solid #0969da;background:#ddf4ff;padding:8px 12px}</style></head><body>
<h1>vllm-locust {{ title }}</h1><p class="small">{{ doc.sweep or "" }} against {{ doc.host }}; {{ doc.steps|length }} step(s)</p>
{% for line in headline %}<div class="box">{{ line }}</div>{% endfor %}
<h2>Steps</h2><table id="steps"><tr>{% for _k, label, _s in table %}<th>{{ label }}</th>{% endfor %}<th>run</th></tr>
{% for s in doc.steps %}<tr>{% for k, _l, spec in table %}<td{% if spec == "s" %} class="l"{% endif %}>{{ fmt(s.get(k), spec) }}</td>{% endfor %}
<td class="l">{{ s.name }}</td></tr>{% endfor %}</table>
{% for p in plots %}<figure id="plot-{{ p.key }}"><figcaption><b>{{ p.title }}</b></figcaption>
<img alt="{{ p.title }}" src="data:image/png;base64,{{ p.png_base64() }}"></figure>{% endfor %}
</body></html>"""


def _points(steps: Sequence[dict[str, Any]], x: str, y: str) -> tuple[list[float], list[float]]:
    pts = sorted(
        (s[x], s[y]) for s in steps if isinstance(s.get(x), int | float) and isinstance(s.get(y), int | float)
    )
    return [p[0] for p in pts], [p[1] for p in pts]


def curves_figure(steps: Sequence[dict[str, Any]]) -> Plot | None:
    """TTFT/TPOT/E2EL p50 and p99 against the achieved request rate."""
    if not any(isinstance(s.get("achieved_rate"), int | float) for s in steps):
        return None
    fig = Figure(figsize=(12, 3.4))
    for i, (m, title) in enumerate(CURVES):
        ax = fig.add_subplot(1, 3, i + 1)
        for stat, style in (("p50", "o-"), ("p99", "s--")):
            xs, ys = _points(steps, "achieved_rate", f"{m}_{stat}_ms")
            ax.plot(xs, ys, style, label=f"{title} {stat}", ms=4)
        ax.set_xlabel("achieved request rate (req/s)")
        ax.set_ylabel("ms")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return Plot("latency-vs-rate", "Latency against the achieved request rate", fig)


def pareto_figure(steps: Sequence[dict[str, Any]]) -> Plot | None:
    """A user's output tok/s (1000 / median TPOT) against total output tok/s, one point per step."""
    xs, ys = _points(steps, "output_throughput", "output_tok_per_s_per_user")
    if not xs:
        return None
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(xs, ys, "o-")
    for s in steps:
        if isinstance(s.get("output_throughput"), int | float) and isinstance(
            s.get("output_tok_per_s_per_user"), int | float
        ):
            label = s["kind"] if s.get("target") is None else f"{s['target']:g}"
            ax.annotate(
                label,
                (s["output_throughput"], s["output_tok_per_s_per_user"]),
                fontsize=7,
                textcoords="offset points",
                xytext=(4, 4),
            )
    ax.set_xlabel("total output tok/s")
    ax.set_ylabel("output tok/s per user (1000 / median TPOT)")
    ax.set_title("Throughput against interactivity (Pareto)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return Plot("pareto", "Per-user tok/s against total tok/s", fig)


def render_markdown(doc: dict[str, Any], title: str, headline: Sequence[str]) -> str:
    """The steps as a Markdown table."""
    out = [f"## vllm-locust {title}", "", *[f"**{h}**" for h in headline], ""]
    out.append("| " + " | ".join(label for _k, label, _s in TABLE) + " |")
    out.append("|" + "---|" * len(TABLE))
    for s in doc["steps"]:
        out.append("| " + " | ".join(fmt(s.get(k), spec) for k, _l, spec in TABLE) + " |")
    return "\n".join(out) + "\n"


def write_sweep_report(
    path: str, doc: dict[str, Any] | None = None, *, title: str = "sweep", headline: Sequence[str] = ()
) -> str:
    """Write PATH/report/report.{html,md,json} for the sweep in PATH; returns the HTML path."""
    if doc is None:
        doc = load_sweep(path)
    out = os.path.join(path, REPORT_DIR)
    os.makedirs(out, exist_ok=True)
    plots = [p for p in (curves_figure(doc["steps"]), pareto_figure(doc["steps"])) if p is not None]
    env = jinja2.Environment(autoescape=True)
    html = env.from_string(_HTML).render(
        doc=doc, plots=plots, table=TABLE, fmt=fmt, title=title, headline=headline
    )
    write_atomic(os.path.join(out, REPORT_HTML), html)
    write_atomic(os.path.join(out, REPORT_MD), render_markdown(doc, title, headline))
    atomic_json(os.path.join(out, REPORT_JSON), {"tool": "vllm-locust report", "kind": title, **doc})
    return os.path.join(out, REPORT_HTML)


def rewrite_report(path: str) -> str:
    """The report of a sweep or SLO-search directory, from its sweep.json."""
    doc = load_sweep(path)
    if doc.get("kind") == "max_rate_search":
        return write_sweep_report(
            path, doc, title="SLO search (--find-max-rate)", headline=search_headline(doc)
        )
    return write_sweep_report(path, doc)
