"""Renderers: one self-contained HTML file (jinja2, PNGs inlined as base64), Markdown, PDF (render_pdf.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jinja2

from orchestration.report.compare import describe_setup_differences, lead
from orchestration.report.findings import FindingGroup, problems
from orchestration.report.group_tables import breakdown_text, client_health_line, energy_text, group_tables
from orchestration.report.model import Report, fmt
from orchestration.report.plots import Plot
from vllm_users.measure import metric_keys as K

# No <script>, no external URL: the file opens offline and a browser has nothing to complain about.
HTML_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>vllm-locust report: {{ title }}</title>
<style>
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1b1f23;max-width:1200px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f6f8fa}
td.l,th.l{text-align:left}.better{color:#1a7f37;font-weight:600}.worse{color:#cf222e;font-weight:600}
.neutral{color:#1b1f23}
.finding{border-left:4px solid #d4a72c;background:#fff8c5;padding:8px 12px;margin:8px 0}
.finding.critical{border-color:#cf222e;background:#ffebe9}
.finding.info{border-color:#0969da;background:#ddf4ff}
.ok{border-left:4px solid #1a7f37;background:#dafbe1;padding:8px 12px}
.warn{color:#9a6700}img{max-width:100%}.small{font-size:12px;color:#57606a}
</style></head><body>
<h1>vllm-locust report: {{ title }}</h1>
<h2 id="what-ran">What was run, and the verdict</h2>
<table id="headline-table"><tr><th class="l">Run</th><th class="l">Load applied</th><th class="l">Verdict</th></tr>
{% for name, load, word in report.headline() %}<tr data-run="{{ name }}"><td class="l">{{ name }}</td><td class="l">{{ load }}</td>
<td class="l verdict">{{ word }}</td></tr>{% endfor %}</table>
{% if lead_lines %}<div class="finding" id="comparison-lead">{% for line in lead_lines %}<b>{{ line }}</b>{% if not loop.last %}<br>{% endif %}{% endfor %}</div>{% endif %}
{% if setup_lines %}<div class="finding" id="setup-differences"><b>The runs' setups differ</b>: the comparison below is
between different experiments.{% for line in setup_lines %}<br>{{ line }}{% endfor %}</div>{% endif %}
<p class="small">Created {{ report.created }} &middot; {{ report.runs|length }} run(s)
{% for r in report.runs %}<br>{{ r.name }}: {{ r.result.model_id or "model ?" }}, {{ r.result.date or "" }},
source {{ r.source }} ({{ r.run_dir }}){% endfor %}</p>
{% for f in report.failed_inputs %}<p class="warn">Not reported: {{ f }}</p>{% endfor %}

<h2 id="diagnosis">Diagnosis</h2>
{% for g in report.finding_groups() %}
<div class="finding {{ g.severity }}" data-rule="{{ g.rule }}" data-runs="{{ g.runs|join(',') }}"><b>{{ g.title }}</b> ({{ g.runs|join(", ") }}, {{ g.severity }})<br>
<span class="small">Rule: {{ g.threshold }}</span><br>Evidence: {% set lines = g.evidence_lines() %}{% if lines|length == 1 %}{{ lines[0] }}{% else %}{% for line in lines %}<br>&nbsp;&nbsp;{{ line }}{% endfor %}{% endif %}<br>Try: {{ g.action }}</div>
{% endfor %}{% if not report.findings %}<div class="ok">No rule fired: no failures, tail, cache, client or SLO problem detected.</div>
{% elif not problems %}<div class="ok">No problem found: the notes above are information, not problems.</div>{% endif %}

<h2 id="summary">Summary</h2>
<table id="summary-table"><tr><th class="l">Metric</th>{% for r in report.runs %}<th>{{ r.name }}</th>{% endfor %}</tr>
{% for key, label, vals in report.summary_rows() %}<tr data-key="{{ key }}"><td class="l">{{ label }}</td>
{% for v in vals %}<td>{{ v }}</td>{% endfor %}</tr>
{% endfor %}</table>

{% if server_rows %}<h2 id="server">Server side (Prometheus /metrics)</h2>
<table id="server-table"><tr><th class="l">Metric</th>{% for r in report.runs %}<th>{{ r.name }}</th>{% endfor %}</tr>
{% for key, label, vals in server_rows %}<tr data-key="{{ key }}"><td class="l">{{ label }}</td>
{% for v in vals %}<td>{{ v }}</td>{% endfor %}</tr>{% endfor %}</table>
<p class="small">Client TTFT minus server TTFT (the means: exact) is network, the API server outside the engine's clock, and client overhead. The server's percentiles come from its histogram buckets, interpolated as Prometheus does: as coarse as the buckets (a p50 or p99 may read above the client's).</p>{% endif %}

{% if report.comparison %}<h2 id="compare">Comparison (baseline {{ report.comparison.baseline }})</h2>
{% if setup_lines %}<p class="warn">Setups differ: {{ setup_lines|join("; ") }}.</p>{% endif %}
{% for w in report.comparison.warnings %}<p class="warn">{{ w }}</p>{% endfor %}
<p class="small">Better or worse only where a test finds the difference significant; counts (requests, duration) follow
the run's length and are neither.</p>
<table id="compare-table"><tr><th class="l">Metric</th>{% for n in report.comparison.runs %}<th>{{ n }}</th>{% endfor %}
{% for n in report.comparison.runs[1:] %}<th>&Delta; {{ n }}</th>{% endfor %}</tr>
{% for row in report.comparison.rows %}<tr data-key="{{ row.metric }}"><td class="l">{{ row.metric }}
{% if row.better %}<span class="small">({{ row.better }} is better)</span>{% endif %}</td>
{% for v in row["values"] %}<td>{{ fmt(v, ".4g") }}</td>{% endfor %}
{% for c in row.changes %}<td class="{{ c.verdict if c.verdict in ('better', 'worse') else 'neutral' }}" data-verdict="{{ c.verdict }}">{% if c.abs is not none %}{{ fmt(c.abs, "+.4g") }}
{% if c.pct is not none %}({{ fmt(c.pct, "+.1f") }} %){% endif %} {{ c.verdict }}{% else %}n/a{% endif %}
<br><span class="small sig" data-significant="{{ c.significance.significant if c.significance else '' }}">{{ describe(c.significance) }}</span></td>{% endfor %}
</tr>{% endfor %}</table>{% endif %}

<h2 id="plots">Plots</h2>
{% for p in plots %}<figure id="plot-{{ p.key }}"><figcaption><b>{{ p.title }}</b></figcaption>
<img alt="{{ p.title }}" src="data:image/png;base64,{{ p.png_base64() }}"></figure>
{% else %}<p class="small">No per-request data: no plots.</p>{% endfor %}

{% for r in report.runs %}{% if r.result.per_scenario and r.result.per_scenario|length > 1 %}
<h2>Per scenario: {{ r.name }}</h2><table><tr><th class="l">Scenario</th><th>ok</th><th>failed</th>
<th>TTFT p50</th><th>TTFT p99</th><th>TPOT p50</th><th>E2EL p50</th><th>tok/s</th></tr>
{% for name, s in r.result.per_scenario.items() %}<tr><td class="l">{{ name }}</td><td>{{ s.completed }}</td>
<td>{{ s.failed }}</td><td>{{ fmt(s.median_ttft_ms, ".2f") }}</td><td>{{ fmt(s.p99_ttft_ms, ".2f") }}</td>
<td>{{ fmt(s.median_tpot_ms, ".2f") }}</td><td>{{ fmt(s.median_e2el_ms, ".2f") }}</td>
<td>{{ fmt(s.output_throughput, ".1f") }}</td></tr>{% endfor %}</table>{% endif %}{% endfor %}

{% for r in report.runs %}{% if r.result.classes %}{% set cl = r.result.classes %}
<h2 id="classes-{{ r.name }}">Per class: {{ r.name }}</h2><table class="classes-table"><tr><th class="l">Class</th>
<th>weight</th><th>got (output tokens)</th><th>ok</th><th>failed</th><th>tok/s</th><th>TTFT p50</th><th>TTFT p99</th>
<th>TPOT p99</th><th>E2EL p99</th><th>SLO (ms)</th><th>good</th><th>goodput (req/s)</th></tr>
{% for name, c in cl.per_class.items() %}<tr data-class="{{ name }}"><td class="l">{{ name }}</td>
<td>{{ fmt(100 * c.weight_share, ".0f") }} %</td><td>{{ fmt(100 * c.output_token_share, ".0f") }} %</td>
<td>{{ c.completed }}</td><td>{{ c.failed }}</td><td>{{ fmt(c.output_throughput, ".1f") }}</td>
<td>{{ fmt(c.get('median_ttft_ms'), ".1f") }}</td><td>{{ fmt(c.get('p99_ttft_ms'), ".1f") }}</td><td>{{ fmt(c.get('p99_tpot_ms'), ".2f") }}</td>
<td>{{ fmt(c.get('p99_e2el_ms'), ".1f") }}</td><td>{% for k, v in c.slo_ms.items() %}{{ k }}:{{ v }} {% else %}-{% endfor %}</td>
<td>{% if c.good_fraction is not none %}{{ fmt(100 * c.good_fraction, ".1f") }} %{% else %}n/a{% endif %}</td>
<td>{{ fmt(c.request_goodput, ".3g") }}</td></tr>{% endfor %}</table>
<p class="small">Jain's fairness index of goodput / weight: <b>{{ fmt(cl.fairness.jain_index, ".3f") }}</b>
(1 = every class got goodput in proportion to its weight; 1/n = one class got all of it).</p>{% endif %}{% endfor %}

{% for r in report.runs %}{% for t in group_tables(r.result, r.name) %}
<h2>{{ t.title }}</h2><table class="group-table"><tr>{% for h in t.header %}<th{% if loop.first %} class="l"{% endif %}>{{ h }}</th>{% endfor %}</tr>
{% for row in t.rows %}<tr>{% for c in row %}<td{% if loop.first %} class="l"{% endif %}>{{ c }}</td>{% endfor %}</tr>{% endfor %}</table>
{% for n in t.notes %}<p class="small">{{ n }}</p>{% endfor %}{% endfor %}{% endfor %}

{% for r in report.runs %}{% set lines = breakdown_text(r.result) %}{% if lines %}
<h2>Where a TTFT goes: {{ r.name }}</h2><pre class="breakdown">{{ lines|join("\n") }}</pre>{% endif %}{% endfor %}

{% for r in report.runs %}{% set lines = energy_text(r.result) %}{% if lines %}
<h2 id="energy-{{ loop.index }}">GPU energy: {{ r.name }}</h2><pre class="breakdown">{{ lines|join("\n") }}</pre>{% endif %}{% endfor %}

{% if report.runs|selectattr("result.cost")|list %}<h2 id="cost">Cost</h2>
<table id="cost-table"><tr><th class="l">Run</th><th>$/GPU-hour x GPUs</th><th>req/s</th><th>$ per 1M output tokens</th><th>$ per request</th></tr>
{% for r in report.runs %}{% if r.result.cost %}{% set c = r.result.cost.at_measured_rate %}<tr><td class="l">{{ r.name }}</td>
<td>{{ r.result.cost.gpu_hour_price_usd }} x {{ r.result.cost.gpus }}</td><td>{{ fmt(c.request_rate, ".3g") }}</td>
<td>{{ fmt(c.usd_per_million_output_tokens, ".4g") }}</td><td>{{ fmt(c.usd_per_request, ".4g") }}</td></tr>{% endif %}{% endfor %}</table>
<p class="small">At the measured rate: the deployment is paid by the hour, busy or not.</p>{% endif %}

{% if report.runs|selectattr("result.replay")|list %}<h2 id="replay">Replay fidelity</h2>
<table id="replay-table"><tr><th class="l">Run</th><th class="l">trace</th><th>time scale</th><th>trace requests</th><th>sent</th><th>not sent</th>
<th>lag p50 (ms)</th><th>lag p99 (ms)</th><th>lag max (ms)</th><th>block reuse (trace)</th><th>server prefix hits</th></tr>
{% for r in report.runs %}{% if r.result.replay %}{% set p = r.result.replay %}<tr><td class="l">{{ r.name }}</td>
<td class="l">{{ p.format }}: {{ p.trace }}</td><td>{{ fmt(p.time_scale, "g") }}</td><td>{{ p.trace_requests }}</td><td>{{ p.sent }}</td>
<td{% if p.not_sent %} class="warn"{% endif %}>{{ p.not_sent }}</td>
{% for k in ("p50", "p99", "max") %}<td>{% if p.lag_ms %}{{ fmt(p.lag_ms[k], ".2f") }}{% else %}n/a{% endif %}</td>{% endfor %}
<td>{% if p.expected_block_reuse is not none %}{{ fmt(100 * p.expected_block_reuse, ".1f") }} %{% else %}n/a{% endif %}</td>
<td>{% if p.server_prefix_hit_rate is not none %}{{ fmt(100 * p.server_prefix_hit_rate, ".1f") }} %{% else %}n/a{% endif %}</td></tr>{% endif %}{% endfor %}</table>
<p class="small">Lag: send time less the trace's time (t0 + offset / time scale) of each request on the schedule (a session's
later turns follow their previous turn instead). Block reuse: the prefix-cache hit rate the trace's hash ids imply for
an unbounded cache (docs/traces.md).</p>{% endif %}

{% for r in report.runs %}{% if r.result.repeats %}<h2 id="repeats-{{ r.name }}">Repeats: {{ r.name }} ({{ r.result.repeats.n }} runs, mean and 95 % CI, t-distribution)</h2>
<table class="repeats-table"><tr><th class="l">Metric</th><th>mean</th><th>95 % CI</th><th>std</th><th>values</th></tr>
{% for name, m in r.result.repeats.metrics.items() %}<tr data-key="{{ name }}"><td class="l">{{ name }}</td><td>{{ fmt(m.mean, ".4g") }}</td>
<td>{% if m.ci_low is not none %}{{ fmt(m.ci_low, ".4g") }} &ndash; {{ fmt(m.ci_high, ".4g") }}{% else %}n/a{% endif %}</td>
<td>{{ fmt(m.std, ".3g") }}</td><td class="l">{% for v in m["values"] %}{{ fmt(v, ".4g") }} {% endfor %}</td></tr>{% endfor %}</table>{% endif %}{% endfor %}

{% if report.runs|selectattr("result.windows")|list %}<h2 id="windows">Measurement windows</h2>
<table id="windows-table"><tr><th class="l">Run</th><th>warm-up (excluded)</th><th>measured</th><th>cool-down (excluded)</th></tr>
{% for r in report.runs %}{% if r.result.windows %}<tr><td class="l">{{ r.name }}</td>
{% for k in ("warmup", "measured", "cooldown") %}{% set w = r.result.windows[k] %}<td data-window="{{ k }}">
{% if w %}{{ w.requests }} req{% if w.spec %} ({{ w.spec }}){% endif %}{% if w.requests %}, {{ fmt(w.start_s, ".1f") }}&ndash;{{ fmt(w.end_s, ".1f") }} s{% endif %}{% else %}&ndash;{% endif %}</td>
{% endfor %}</tr>{% endif %}{% endfor %}</table>
<p class="small">Requests in the warm-up and cool-down windows stay in records.jsonl; every statistic above comes from the measured window.</p>{% endif %}

<h2 id="health">Run health and caveats</h2>
{% for r in report.runs %}<p><b>{{ r.name }}</b>: errors {{ r.result.errors_by_kind or "none" }};
client: {{ client_health_line(r.result) }}
{% if r.result.compressed_streams %}<br>Compressed by the server (decoded): {{ r.result.compressed_streams }}{% endif %}
{% if r.result.delivered_at_once %}<br>Delivered at once (a buffering proxy?): {{ r.result.delivered_at_once.requests }} of {{ r.result.delivered_at_once.streamed_requests }} streamed; they give no TPOT or ITL{% endif %}
{% if r.result.usage_below_chunks %}<br>Usage below chunks (chunks counted): {{ r.result.usage_below_chunks.requests }} requests (usage {{ r.result.usage_below_chunks.usage_output_tokens }} tokens, chunks {{ r.result.usage_below_chunks.chunk_output_tokens }}){% endif %}
{% if r.result.error_messages %}<table class="errors"><tr><th>count</th><th class="l">kind</th><th class="l">message</th></tr>
{% for e in r.result.error_messages %}<tr><td>{{ e.count }}</td><td class="l">{{ e.kind }}</td><td class="l">{{ e.message or "" }}</td></tr>
{% endfor %}</table>{% endif %}
{% if r.approximate %}<br><span class="warn">Approximate (Locust rounding): {{ r.approximate|join(", ") }}</span>{% endif %}
{% for w in r.warnings %}<br><span class="warn">{{ w }}</span>{% endfor %}</p>{% endfor %}
</body></html>
"""


def render_html(report: Report, plots: Sequence[Plot]) -> str:
    """The self-contained HTML report."""
    env = jinja2.Environment(autoescape=True, undefined=jinja2.ChainableUndefined)
    tpl = env.from_string(HTML_TEMPLATE)
    title = ", ".join(r.name for r in report.runs)
    from orchestration.report.significance import describe

    return tpl.render(
        report=report,
        plots=plots,
        fmt=fmt,
        describe=describe,
        group_tables=group_tables,
        breakdown_text=breakdown_text,
        energy_text=energy_text,
        client_health_line=client_health_line,
        title=title,
        server_rows=report.server_rows(),
        problems=problems(report.findings),
        setup_lines=describe_setup_differences(report.comparison) if report.comparison else [],
        lead_lines=lead(report.comparison) if report.comparison else [],
    )


def render_markdown(report: Report) -> str:
    """A Markdown summary for pull requests: headline table, comparison, findings."""
    names = [r.name for r in report.runs]
    out = [f"## vllm-locust report: {', '.join(names)}", ""]
    out += [f"- **{name}**: {load}. **Verdict: {word}.**" for name, load, word in report.headline()]
    if report.comparison:
        out += ["", *(f"**{line}**" for line in lead(report.comparison))]
    setup = describe_setup_differences(report.comparison) if report.comparison else []
    if setup:
        out.append(
            "\n> **The runs' setups differ** (the comparison is between different experiments): "
            + "; ".join(setup)
        )
    out += ["", "### Diagnosis", ""]
    out += _findings_markdown(report)
    out += ["", "### Results", ""]
    out.append("| Metric | " + " | ".join(names) + " |")
    out.append("|---|" + "---:|" * len(names))
    for _key, label, vals in report.summary_rows() + report.server_rows():
        out.append(f"| {label} | " + " | ".join(vals) + " |")
    if report.comparison:
        out += ["", f"### Comparison (baseline {report.comparison['baseline']})", ""]
        out += [f"> Setups differ: {line}" for line in setup]
        out += [f"> {w}" for w in report.comparison["warnings"]]
        others = report.comparison["runs"][1:]
        out.append("| Metric | " + " | ".join(f"Δ {n}" for n in others) + " |")
        out.append("|---|" + "---:|" * len(others))
        for row in report.comparison["rows"]:
            cells = [
                (
                    f"{fmt(c['abs'], '+.4g')} ({fmt(c['pct'], '+.1f')} %) {c['verdict']}, {_sig_word(c)}"
                    if c["abs"] is not None
                    else "n/a"
                )
                for c in row["changes"]
            ]
            out.append(f"| {row['metric']} | " + " | ".join(cells) + " |")
    for r in report.runs:
        w = r.result.get(K.WINDOWS)
        if w:
            parts = [
                f"{k} {w[k]['requests']} req" + (f" ({w[k]['spec']})" if w[k].get("spec") else "")
                for k in ("warmup", "measured", "cooldown")
                if k in w
            ]
            out.append(
                f"\nWindows of {r.name}: "
                + ", ".join(parts)
                + " (warm-up/cool-down left out of the statistics)"
            )
    for r in report.runs:
        out += _class_markdown(r.name, r.result.get("classes"))
        out += _group_markdown(r.name, r.result)
    for r in report.runs:
        if r.result.get("replay"):  # --trace: how faithfully the trace was replayed, the summary's lines
            from orchestration.report.summary import replay_lines

            out.append(
                "\n"
                + f"Replay fidelity of {r.name}: "
                + "; ".join(" ".join(x.split()) for x in replay_lines(r.result["replay"])[1:])
            )
    for r in report.runs:
        if r.result.get("cost"):
            from vllm_users.measure.cost import format_cost

            out.append("\n" + f"{r.name}: " + " ".join(x.strip() for x in format_cost(r.result["cost"])))
    out += ["", "### Run health", ""]
    for r in report.runs:
        for w in r.warnings:
            out.append(f"- ⚠ {r.name}: {w}")
        if r.approximate:
            out.append(f"- ⚠ {r.name}: approximate fields (Locust rounding): {', '.join(r.approximate)}")
    for failed in report.failed_inputs:
        out.append(f"- not reported: {failed}")
    return "\n".join(out) + "\n"


def _evidence(g: FindingGroup) -> str:
    """A group's evidence on one line."""
    return "; ".join(g.evidence_lines())


def no_problem_line(report: Report) -> str | None:
    """What the diagnosis says when no problem was found; None when one was. Never "no rule fired" beside a note."""
    if problems(report.findings):
        return None
    if report.findings:
        return "No problem found: the notes above are information, not problems."
    return "No rule fired (no failure, tail, cache, client, GPU or SLO problem)."


def _findings_markdown(report: Report) -> list[str]:
    out = [
        f"- **{g.title}** ({', '.join(g.runs)}, {g.severity}): {_evidence(g)}. Rule: {g.threshold}. Try: {g.action}"
        for g in report.finding_groups()
    ]
    line = no_problem_line(report)
    return out + ([line] if line else [])


def _group_markdown(name: str, result: dict[str, Any]) -> list[str]:
    """Per model (and every other grouping block): one row per group."""
    out: list[str] = []
    for t in group_tables(result, name):
        out += ["", f"### {t.title}", "", "| " + " | ".join(t.header) + " |"]
        out.append("|---" + "|---:" * (len(t.header) - 1) + "|")
        out += ["| " + " | ".join(row) + " |" for row in t.rows]
        out += ["", *t.notes] if t.notes else []
    lines = breakdown_text(result)
    if lines:
        out += ["", f"### Where a TTFT goes: {name}", "", "```", *lines, "```"]
    energy = energy_text(result)
    if energy:
        out += ["", f"### GPU energy: {name}", "", "```", *energy, "```"]
    return out


def _class_markdown(name: str, block: dict[str, Any] | None) -> list[str]:
    """Traffic classes: one row per class, then Jain's index (nothing without classes)."""
    if not block:
        return []
    out = [
        "",
        f"### Per class: {name}",
        "",
        "| class | weight | got | ok | failed | TTFT p99 ms | E2EL p99 ms | SLO | good |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for cname, c in block["per_class"].items():
        slo = " ".join(f"{k}:{v:g}" for k, v in c["slo_ms"].items()) or "-"
        good = "n/a" if c["good_fraction"] is None else f"{c['good_fraction']:.1%}"
        out.append(
            f"| {cname} | {c['weight_share']:.0%} | {c['output_token_share']:.0%} | {c[K.COMPLETED]} | "
            f"{c[K.FAILED]} | {fmt(c.get(K.TTFT.p(99)), '.1f')} | {fmt(c.get(K.E2EL.p(99)), '.1f')} | {slo} | "
            f"{good} |"
        )
    out.append(f"\nJain's fairness index (goodput / weight): {fmt(block['fairness']['jain_index'], '.3f')}")
    return out


def _sig_word(change: dict[str, object]) -> str:
    """Short significance for Markdown cells: the test's verdict with its name and p."""
    sig = change.get("significance")
    if not isinstance(sig, dict) or sig.get("test") is None:
        return "not tested"
    word = "significant" if sig["significant"] else "not significant"
    return f"{word} ({sig['test']}, p={sig['p_value']:.2g})"


def render_pdf(report: Report, plots: Sequence[Plot], path: str) -> None:
    """The PDF report: the HTML's sections, typeset (orchestration/report/render_pdf.py)."""
    # imported here: ReportLab (and the fonts it loads) costs time that HTML and Markdown reports skip
    from orchestration.report.render_pdf import write_pdf

    write_pdf(report, plots, path)
