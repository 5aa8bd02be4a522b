"""The PDF report: the HTML report's sections, in its order and with its words, typeset with ReportLab from the same
report model (orchestration/report/model.py); its figures are the PNGs the HTML embeds.

Imported only when a PDF is asked for (orchestration/report/render.py imports it lazily).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from orchestration.report.compare import describe_setup_differences
from orchestration.report.findings import problems
from orchestration.report.group_tables import breakdown_text, client_health_line, energy_text, group_tables
from orchestration.report.model import Report, fmt
from orchestration.report.pdf_layout import Cell, box, build, figure, heading, para, table, text
from orchestration.report.plots import Plot
from orchestration.report.significance import describe
from vllm_users.measure import metric_keys as K

__all__ = ["FIGURE_DPI", "write_pdf", "write_sweep_pdf"]

FIGURE_DPI = 110  # sharper than the HTML's 80 dpi on paper; the figure is the same
WINDOWS = ("warmup", "measured", "cooldown")


def _table(header: Sequence[str], rows: Sequence[Sequence[Cell | str]], left: Sequence[int] = (0,)) -> Any:
    """A table from header labels and cells; plain strings become right-aligned cells, columns in `left` not."""
    head = [Cell.of(h, j in left) for j, h in enumerate(header)]
    body = [[c if isinstance(c, Cell) else Cell.of(c, j in left) for j, c in enumerate(r)] for r in rows]
    return table(head, body)


def _plain(d: dict[str, Any], key: str) -> str:
    """A value as the HTML's `{{ d.key }}` prints it: nothing for a missing key."""
    return str(d[key]) if key in d else ""


def _lead(report: Report, setup: list[str]) -> list[Any]:
    out = [heading("What was run, and the verdict")]
    rows = [[name, load, word] for name, load, word in report.headline()]
    out.append(_table(["Run", "Load applied", "Verdict"], rows, left=(0, 1, 2)))
    if setup:
        lines = ["<b>The runs' setups differ</b>: the comparison below is between different experiments."]
        out += box(lines + [text(x) for x in setup], "warning")
    created = [f"Created {text(report.created)} · {len(report.runs)} run(s)"]
    for r in report.runs:
        res = r.result
        created.append(
            text(f"{r.name}: {res.get('model_id') or 'model ?'}, {res.get('date') or ''}, source {r.source}")
            + text(f" ({r.run_dir})")
        )
    out.append(para("<br/>".join(created), "small"))
    out += [para(text(f"Not reported: {f}"), "warn") for f in report.failed_inputs]
    return out


def _diagnosis(report: Report) -> list[Any]:
    out = [heading("Diagnosis")]
    for g in report.finding_groups():
        lines = [f"<b>{text(g.title)}</b> ({text(', '.join(g.runs))}, {text(g.severity)})"]
        lines.append(f'<font size="8" color="#57606a">Rule: {text(g.threshold)}</font>')
        ev = g.evidence_lines()
        lines += (
            ["Evidence: " + text(ev[0])]
            if len(ev) == 1
            else ["Evidence:"] + ["&nbsp;&nbsp;" + text(e) for e in ev]
        )
        lines.append("Try: " + text(g.action))
        out += box(lines, g.severity)
    if not report.findings:
        out += box(["No rule fired: no failures, tail, cache, client or SLO problem detected."], "ok")
    elif not problems(report.findings):
        out += box(["No problem found: the notes above are information, not problems."], "ok")
    return out


def _metric_tables(report: Report) -> list[Any]:
    names = [r.name for r in report.runs]
    out = [heading("Summary")]
    out.append(_table(["Metric", *names], [[label, *vals] for _k, label, vals in report.summary_rows()]))
    server = report.server_rows()
    if server:
        out.append(heading("Server side (Prometheus /metrics)"))
        out.append(_table(["Metric", *names], [[label, *vals] for _k, label, vals in server]))
        out.append(
            para(
                "Client TTFT minus server TTFT (the means: exact) is network, the API server outside the engine's clock, and client overhead. The server's percentiles come from its histogram buckets, interpolated as Prometheus does: as coarse as the buckets (a p50 or p99 may read above the client's).",
                "small",
            )
        )
    return out


def _change(c: dict[str, Any]) -> Cell:
    """A comparison cell as the HTML's: the change and its verdict (coloured), the test under it."""
    klass = c["verdict"] if c["verdict"] in ("better", "worse") else ""
    if c["abs"] is None:
        first = "n/a"
    else:
        pct = f" ({fmt(c['pct'], '+.1f')} %)" if c["pct"] is not None else ""
        first = f"{fmt(c['abs'], '+.4g')}{pct} {c['verdict']}"
    return Cell([(first, klass), (describe(c.get("significance") or {}), "small")])


def _comparison(report: Report, setup: list[str]) -> list[Any]:
    comp = report.comparison
    if not comp:
        return []
    out = [heading(f"Comparison (baseline {comp['baseline']})")]
    if setup:
        out.append(para(text("Setups differ: " + "; ".join(setup) + "."), "warn"))
    out += [para(text(w), "warn") for w in comp["warnings"]]
    out.append(
        para(
            "Better or worse only where a test finds the difference significant; counts (requests, duration) "
            "follow the run's length and are neither.",
            "small",
        )
    )
    header = ["Metric", *comp["runs"], *[f"Δ {n}" for n in comp["runs"][1:]]]
    rows: list[list[Cell | str]] = []
    for row in comp["rows"]:
        metric = [(row["metric"], "")] + (
            [(f"({row['better']} is better)", "small")] if row["better"] else []
        )
        values = [fmt(v, ".4g") for v in row["values"]]
        rows.append([Cell(metric, left=True), *values, *[_change(c) for c in row["changes"]]])
    out.append(_table(header, rows))
    return out


def _plots(plots: Sequence[Plot]) -> list[Any]:
    if not plots:
        return [heading("Plots"), para("No per-request data: no plots.", "small")]
    out: list[Any] = []
    for i, p in enumerate(plots):
        above = [heading("Plots")] if i == 0 else []  # the section's heading on the page of its first figure
        out += figure(p.title, base64.b64decode(p.png_base64(dpi=FIGURE_DPI)), FIGURE_DPI, above)
    return out


def _per_run_tables(report: Report) -> list[Any]:
    out: list[Any] = []
    for r in report.runs:
        per = r.result.get("per_scenario") or {}
        if len(per) > 1:
            out.append(heading(f"Per scenario: {r.name}"))
            header = ["Scenario", "ok", "failed", "TTFT p50", "TTFT p99", "TPOT p50", "E2EL p50", "tok/s"]
            rows = [
                [name, _plain(s, K.COMPLETED), _plain(s, K.FAILED)]
                + [fmt(s.get(k), ".2f") for k in (K.TTFT.key("median"), K.TTFT.p(99), K.TPOT.key("median"))]
                + [fmt(s.get(K.E2EL.key("median")), ".2f"), fmt(s.get(K.OUTPUT_THROUGHPUT), ".1f")]
                for name, s in per.items()
            ]
            out.append(_table(header, rows))
    for r in report.runs:
        cl = r.result.get("classes")
        if cl:
            out += [heading(f"Per class: {r.name}"), _classes(cl)]
            jain = fmt(cl["fairness"]["jain_index"], ".3f")
            out.append(
                para(
                    f"Jain's fairness index of goodput / weight: <b>{jain}</b> (1 = every class got goodput in "
                    "proportion to its weight; 1/n = one class got all of it).",
                    "small",
                )
            )
        for t in group_tables(r.result, r.name):
            out += [heading(t.title), _table(t.header, t.rows), *(para(text(n), "small") for n in t.notes)]
        lines = breakdown_text(r.result)
        if lines:
            # the console's columns, aligned: every space kept
            mono = "<br/>".join(text(x).replace(" ", "&nbsp;") for x in lines)
            out += [heading(f"Where a TTFT goes: {r.name}"), para(mono, "mono")]
        energy = energy_text(r.result)
        if energy:
            mono = "<br/>".join(text(x).replace(" ", "&nbsp;") for x in energy)
            out += [heading(f"GPU energy: {r.name}"), para(mono, "mono")]
    return out


def _classes(cl: dict[str, Any]) -> Any:
    header = ["Class", "weight", "got (output tokens)", "ok", "failed", "tok/s", "TTFT p50", "TTFT p99"]
    header += ["TPOT p99", "E2EL p99", "SLO (ms)", "good", "goodput (req/s)"]
    rows = []
    for name, c in cl["per_class"].items():
        good = "n/a" if c.get("good_fraction") is None else f"{fmt(100 * c['good_fraction'], '.1f')} %"
        slo = " ".join(f"{k}:{v}" for k, v in c["slo_ms"].items()) or "-"
        rows.append(
            [
                name,
                f"{fmt(100 * c['weight_share'], '.0f')} %",
                f"{fmt(100 * c['output_token_share'], '.0f')} %",
            ]
            + [_plain(c, K.COMPLETED), _plain(c, K.FAILED), fmt(c.get(K.OUTPUT_THROUGHPUT), ".1f")]
            + [fmt(c.get(K.TTFT.key("median")), ".1f"), fmt(c.get(K.TTFT.p(99)), ".1f")]
            + [fmt(c.get(K.TPOT.p(99)), ".2f"), fmt(c.get(K.E2EL.p(99)), ".1f"), slo, good]
            + [fmt(c.get(K.REQUEST_GOODPUT), ".3g")]
        )
    return _table(header, rows)


def _cost_and_replay(report: Report) -> list[Any]:
    out: list[Any] = []
    costs = [r for r in report.runs if r.result.get("cost")]
    if costs:
        out.append(heading("Cost"))
        rows: list[Sequence[Cell | str]] = []
        for r in costs:
            cost = r.result["cost"]
            c = cost["at_measured_rate"]
            rows.append(
                [r.name, f"{cost['gpu_hour_price_usd']} x {cost['gpus']}", fmt(c.get("request_rate"), ".3g")]
                + [fmt(c.get("usd_per_million_output_tokens"), ".4g"), fmt(c.get("usd_per_request"), ".4g")]
            )
        header = ["Run", "$/GPU-hour x GPUs", "req/s", "$ per 1M output tokens", "$ per request"]
        out += [_table(header, rows)]
        out.append(para("At the measured rate: the deployment is paid by the hour, busy or not.", "small"))
    replays = [r for r in report.runs if r.result.get("replay")]
    if replays:
        out.append(heading("Replay fidelity"))
        header = ["Run", "trace", "time scale", "trace requests", "sent", "not sent"]
        header += [
            "lag p50 (ms)",
            "lag p99 (ms)",
            "lag max (ms)",
            "block reuse (trace)",
            "server prefix hits",
        ]
        rows = []
        for r in replays:
            p = r.result["replay"]
            lag = p.get("lag_ms")
            rows.append(
                [r.name, f"{p.get('format')}: {p.get('trace')}", fmt(p.get("time_scale"), "g")]
                + [_plain(p, "trace_requests"), _plain(p, "sent")]
                + [Cell.of(_plain(p, "not_sent"), klass="warn" if p.get("not_sent") else "")]
                + [fmt(lag[k], ".2f") if lag else "n/a" for k in ("p50", "p99", "max")]
                + [_share(p.get("expected_block_reuse")), _share(p.get("server_prefix_hit_rate"))]
            )
        out.append(_table(header, rows, left=(0, 1)))
        out.append(
            para(
                "Lag: send time less the trace's time (t0 + offset / time scale) of each request on the schedule "
                "(a session's later turns follow their previous turn instead). Block reuse: the prefix-cache hit "
                "rate the trace's hash ids imply for an unbounded cache (docs/traces.md).",
                "small",
            )
        )
    return out


def _share(v: Any) -> str:
    return "n/a" if v is None else f"{fmt(100 * v, '.1f')} %"


def _repeats_and_windows(report: Report) -> list[Any]:
    out: list[Any] = []
    for r in report.runs:
        rep = r.result.get("repeats")
        if rep:
            out.append(heading(f"Repeats: {r.name} ({rep['n']} runs, mean and 95 % CI, t-distribution)"))
            rows = []
            for name, m in rep["metrics"].items():
                ci = (
                    "n/a"
                    if m.get("ci_low") is None
                    else f"{fmt(m['ci_low'], '.4g')} – {fmt(m['ci_high'], '.4g')}"
                )
                values = " ".join(fmt(v, ".4g") for v in m["values"])
                rows.append([name, fmt(m.get("mean"), ".4g"), ci, fmt(m.get("std"), ".3g"), values])
            out.append(_table(["Metric", "mean", "95 % CI", "std", "values"], rows, left=(0, 4)))
    with_windows = [r for r in report.runs if r.result.get(K.WINDOWS)]
    if with_windows:
        out.append(heading("Measurement windows"))
        rows = [[r.name] + [_window(r.result[K.WINDOWS].get(k)) for k in WINDOWS] for r in with_windows]
        out.append(_table(["Run", "warm-up (excluded)", "measured", "cool-down (excluded)"], rows))
        out.append(
            para(
                "Requests in the warm-up and cool-down windows stay in records.jsonl; every statistic above comes "
                "from the measured window.",
                "small",
            )
        )
    return out


def _window(w: dict[str, Any] | None) -> str:
    """'120 req (30s), 0.0–30.1 s' as the HTML's windows cell; '–' for a window the run did not have."""
    if not w:
        return "–"
    out = f"{w['requests']} req" + (f" ({w['spec']})" if w.get("spec") else "")
    if w["requests"]:
        out += f", {fmt(w.get('start_s'), '.1f')}–{fmt(w.get('end_s'), '.1f')} s"
    return out


def _health(report: Report) -> list[Any]:
    out = [heading("Run health and caveats")]
    for r in report.runs:
        res = r.result
        lines = [
            f"<b>{text(r.name)}</b>: errors {text(res.get(K.ERRORS_BY_KIND) or 'none')}; client: "
            + text(client_health_line(res))
        ]
        if res.get(K.COMPRESSED_STREAMS):
            lines.append(text(f"Compressed by the server (decoded): {res[K.COMPRESSED_STREAMS]}"))
        out.append(para("<br/>".join(lines)))
        if res.get(K.ERROR_MESSAGES):
            rows = [[str(e["count"]), e["kind"], e.get("message") or ""] for e in res[K.ERROR_MESSAGES]]
            out.append(_table(["count", "kind", "message"], rows, left=(1, 2)))
        warn = (
            [f"Approximate (Locust rounding): {', '.join(r.approximate)}"] if r.approximate else []
        ) + list(r.warnings)
        out += [para(text(w), "warn") for w in warn]
    return out


def write_pdf(report: Report, plots: Sequence[Plot], path: str) -> None:
    """The PDF report at `path`: the HTML report's sections in its order, then the same figures."""
    title = "vllm-locust report: " + ", ".join(r.name for r in report.runs)
    setup = describe_setup_differences(report.comparison) if report.comparison else []
    story: list[Any] = [heading(title, 1)]
    story += _lead(report, setup) + _diagnosis(report) + _metric_tables(report) + _comparison(report, setup)
    story += _plots(plots) + _per_run_tables(report) + _cost_and_replay(report)
    story += _repeats_and_windows(report) + _health(report)
    build(path, title, story)


def write_sweep_pdf(
    path: str,
    title: str,
    subtitle: str,
    headline: Sequence[str],
    table_spec: Sequence[tuple[str, str, str]],
    steps: Sequence[dict[str, Any]],
    plots: Sequence[Plot],
) -> None:
    """The PDF of a sweep or an SLO search: the HTML's lead, its table of steps (`table_spec`: key, label,
    format; the step's run directory last) and its figures."""
    story: list[Any] = [heading(f"vllm-locust {title}", 1), para(text(subtitle), "small")]
    for line in headline:
        story += box([text(line)], "info")
    story.append(heading("Steps"))
    header = [label for _k, label, _s in table_spec] + ["run"]
    left = [j for j, (_k, _l, spec) in enumerate(table_spec) if spec == "s"] + [len(table_spec)]
    rows = [[fmt(s.get(k), spec) for k, _l, spec in table_spec] + [str(s.get("name", ""))] for s in steps]
    story.append(_table(header, rows, left=left))
    for p in plots:
        story += figure(p.title, base64.b64decode(p.png_base64(dpi=FIGURE_DPI)), FIGURE_DPI)
    build(path, f"vllm-locust {title}", story)
