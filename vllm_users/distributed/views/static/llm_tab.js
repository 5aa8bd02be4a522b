// vllm-locust: the rest of the web UI's "LLM" tab (Locust's extended table shows the latency percentiles).
// Plain DOM and SVG, no dependencies, nothing fetched from outside: polls ./llm/stats every 2 s while the tab is open.
(function () {
  "use strict";
  const POLL_MS = 2000;
  const COLORS = ["#1e88e5", "#e53935", "#43a047", "#fb8c00"];
  let panel = null;
  let timer = null;

  function onTab() {
    return new URLSearchParams(window.location.search).get("tab") === "llm";
  }

  function el(tag, attrs, children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "style") e.style.cssText = v; else e.setAttribute(k, v);
    }
    for (const c of [].concat(children || [])) {
      e.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
    }
    return e;
  }

  function fmt(v, digits) {
    if (v === null || v === undefined || Number.isNaN(v)) return "–";
    if (typeof v !== "number") return String(v);
    return v.toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 1 : digits,
                                       minimumFractionDigits: digits === undefined ? 0 : Math.min(digits, 2) });
  }

  function card(label, key, value, digits) {
    return el("div", { class: "llm-card" }, [
      el("div", { class: "llm-label" }, label),
      el("div", { class: "llm-value", "data-llm": key }, fmt(value, digits)),
    ]);
  }

  function table(headers, rows, key) {
    const head = el("tr", {}, headers.map((h) => el("th", {}, h)));
    const body = rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))));
    return el("table", { class: "llm-table", "data-llm": key }, [el("thead", {}, head), el("tbody", {}, body)]);
  }

  // One line chart: series [{name, values}], times t (epoch s), vertical markers [{t, label}].
  function chart(title, key, t, series, markers, unit) {
    const W = 460, H = 170, L = 52, R = 10, T = 22, B = 24;
    const svgNS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(svgNS, "svg");
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.setAttribute("class", "llm-chart");
    svg.setAttribute("data-llm", key);
    const add = (tag, attrs, text) => {
      const n = document.createElementNS(svgNS, tag);
      for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
      if (text !== undefined) n.textContent = text;
      svg.appendChild(n);
      return n;
    };
    add("text", { x: L, y: 14, class: "llm-chart-title" }, title);
    const vals = series.flatMap((s) => s.values).filter((v) => v !== null && Number.isFinite(v));
    if (t.length < 2 || vals.length === 0) {
      add("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "llm-muted" }, "waiting for data");
      return svg;
    }
    const t0 = t[0], t1 = t[t.length - 1];
    const ymax = Math.max(...vals) * 1.1 || 1;
    const x = (tt) => L + ((tt - t0) / Math.max(t1 - t0, 1e-9)) * (W - L - R);
    const y = (v) => T + (1 - v / ymax) * (H - T - B);
    add("line", { x1: L, y1: y(0), x2: W - R, y2: y(0), class: "llm-axis" });
    add("line", { x1: L, y1: T, x2: L, y2: y(0), class: "llm-axis" });
    add("text", { x: L - 4, y: T + 4, "text-anchor": "end", class: "llm-tick" }, fmt(ymax, 0) + (unit || ""));
    add("text", { x: L - 4, y: y(0), "text-anchor": "end", class: "llm-tick" }, "0");
    add("text", { x: W - R, y: H - 6, "text-anchor": "end", class: "llm-tick" }, `${fmt(t1 - t0, 0)} s`);
    for (const m of markers) {
      if (m.t < t0 - 3 || m.t > t1 + 3) continue;  // the first point comes ~2 s after the start mark
      const mx = x(Math.min(Math.max(m.t, t0), t1));
      add("line", { x1: mx, y1: T, x2: mx, y2: y(0), class: "llm-marker" });
      const right = mx > W - R - 60;  // near the right edge: label on the left of the line
      add("text", { x: mx + (right ? -3 : 3), y: H - B - 4, "text-anchor": right ? "end" : "start",
                    class: "llm-marker-label" }, m.label);
    }
    series.forEach((s, i) => {
      let d = "";
      let pen = false;
      s.values.forEach((v, j) => {
        if (v === null || !Number.isFinite(v)) { pen = false; return; }
        d += `${pen ? "L" : "M"}${x(t[j]).toFixed(1)},${y(v).toFixed(1)}`;
        pen = true;
      });
      add("path", { d, fill: "none", stroke: COLORS[i % COLORS.length], "stroke-width": 1.6 });
      add("text", { x: W - R - 4, y: T + 10 + 12 * i, "text-anchor": "end", fill: COLORS[i % COLORS.length],
                    class: "llm-legend" }, s.name);
    });
    return svg;
  }

  function markerLabel(ev) {
    if (ev.kind === "users") return `${fmt(ev.users, 0)} users`;
    if (ev.kind === "rate") return `${fmt(ev.request_rate)} req/s`;
    return ev.kind;
  }

  function render(s) {
    const tot = s.totals || {};
    const rates = s.rates || {};
    const parts = [];
    // Once the run has ended the figures are result.json's (rates over its benchmark duration, the measured
    // window's counts); while it runs, the rates are the last interval's and say so.
    const fin = s.finished ? s.final : null;
    let status = `${s.state || "ready"} · ${fmt(s.elapsed_s)} s`;
    if (s.finished) {
      status = fin ? `finished: results in ${s.results_dir} (figures as in result.json: the measured window over its `
                     + `${fmt(fin.duration_s, 2)} s benchmark duration`
                     + (fin.left_out ? `; ${fmt(fin.left_out, 0)} requests of --warmup/--cooldown left out)` : ")")
                   : `finished: results in ${s.results_dir} (no result.json was written: no final rates)`;
    }
    parts.push(el("div", { class: "llm-status", "data-llm": "status" }, status));
    const over = s.finished ? "" : " (last 2 s)";
    const measured = fin && fin.left_out ? " (measured window)" : "";
    const cards = [
      card(`output tok/s${over}`, "output_tok_s", rates.output_tok_s),
      card(`req/s${over}`, "req_s", rates.req_s, 2),
      card("in flight", "inflight", tot.inflight, 0),
      card(`completed${measured}`, "completed", fin ? fin.completed : tot.ok, 0),
      card(`failed${measured}`, "failed", fin ? fin.failed : tot.failed, 0),
      card(`output tokens${measured}`, "output_tokens", fin ? fin.output_tokens : tot.output_tokens, 0),
    ];
    if (s.goodput) {
      cards.push(card(`goodput (${s.goodput.slo})`, "goodput_req_s", s.goodput.good_req_s, 2));
      cards.push(card("good fraction", "good_fraction", s.goodput.good_fraction, 3));
    }
    parts.push(el("div", { class: "llm-cards" }, cards));
    const series = s.series || { t: [] };
    const markers = (s.timeline || []).map((ev) => ({ t: ev.t, label: markerLabel(ev) }));
    parts.push(el("div", { class: "llm-charts" }, [
      chart("output tokens/s", "chart_tok_s", series.t, [{ name: "tok/s", values: series.output_tok_s }], markers),
      chart("TTFT (ms, per 2 s)", "chart_ttft", series.t, [
        { name: "p50", values: series.ttft_p50_ms }, { name: "p99", values: series.ttft_p99_ms }], markers, " ms"),
      chart("client in flight vs server queue", "chart_queue", series.t, [
        { name: "client in flight", values: series.inflight },
        { name: "server running+waiting", values: series.server_queue }], markers),
    ]));
    const side = [];
    if (s.classes) side.push(...classesTable(s.classes));
    if (s.replicas) side.push(...fleetTable(s.replicas, "Per replica", "replica", "replicas"));
    if (s.endpoints) side.push(...fleetTable(s.endpoints, "Per endpoint", "endpoint", "endpoints"));
    if (s.arrivals) {
      const a = s.arrivals;
      side.push(el("h3", {}, "Open-loop arrivals"));
      side.push(table(["target req/s", "achieved req/s", "sent", "late", "dropped", "backlog"],
        [[fmt(a.target_rate, 2), fmt(a.achieved_rate, 2), fmt(a.sent, 0), fmt(a.late, 0), fmt(a.dropped, 0),
          fmt(a.backlog, 0)]], "arrivals"));
      side.push(rateControl(a.target_rate));
    }
    if (s.ttfa) {  // reasoning runs: the user waits for the first answer token, not the first token
      side.push(el("h3", {}, "Time to first answer token (reasoning)"));
      side.push(table(["scenario", "answers", "TTFT p50 ms", "TTFA p50 ms", "TTFA p90 ms", "TTFA p99 ms"],
        s.ttfa.map((r) => [r.name, fmt(r.answers, 0), fmt(r.ttft_p50, 2), fmt(r.ttfa_p50, 2), fmt(r.ttfa_p90, 2),
          fmt(r.ttfa_p99, 2)]), "ttfa"));
    }
    const errs = Object.entries(s.errors || {});
    side.push(el("h3", {}, "Errors by kind"));
    side.push(errs.length ? table(["kind", "count"], errs.map(([k, n]) => [k, fmt(n, 0)]), "errors")
                          : el("div", { class: "llm-muted", "data-llm": "errors" }, "none"));
    side.push(el("h3", {}, "Client health (per worker)"));
    // the verdict in the console summary's words: our CPU, our code, the machine (not our client), too short
    side.push(table(["worker", "state", "CPU", "loop lag p99 ms", "verdict", "records"],
      (s.workers || []).map((w) => [w.name, w.state, w.cpu === null ? "–" : `${fmt(100 * w.cpu, 0)} %`,
        fmt(w.loop_lag_p99_ms, 2), w.verdict_text || "–", fmt(w.records, 0)]), "workers"));
    side.push(el("h3", {}, "Server (/metrics)"));
    const sv = s.server;
    side.push(sv ? table(["KV cache", "running", "waiting", "prefix-cache hit rate", "sample age"],
      [[sv.kv_cache_usage === null ? "–" : `${fmt(100 * sv.kv_cache_usage, 1)} %`, fmt(sv.running, 0),
        fmt(sv.waiting, 0), sv.prefix_cache_hit_rate === null ? "–" : `${fmt(100 * sv.prefix_cache_hit_rate, 1)} %`,
        `${fmt(sv.age_s)} s`]], "server") : el("div", { class: "llm-muted", "data-llm": "server" }, "not scraped"));
    const gpu = s.gpu;  // --gpu-metrics: the exporters' latest scrape; energy since the run's first one
    if (gpu) {
      side.push(el("h3", {}, "GPUs (--gpu-metrics)"));
      side.push(table(["GPUs", "power W", "util", "energy J", "J per output token"],
        [[fmt(gpu.gpus, 0), fmt(gpu.power_w, 0), gpu.util_pct === null ? "–" : `${fmt(gpu.util_pct, 0)} %`,
          fmt(gpu.energy_so_far_j, 0), fmt(gpu.j_per_output_token, 4)]], "gpu"));
    }
    if (s.access) side.push(el("p", { class: "llm-muted", "data-llm": "access" }, `Web UI reachable from ${s.access}`));
    side.push(el("p", {}, [el("a", { href: "./llm/report", "data-llm": "report-link" },
                                 s.finished ? "Download the HTML report of the run"
                                            : "Download the HTML report of the run so far")]));
    parts.push(el("div", { class: "llm-side" }, side));
    panel.replaceChildren(...parts);
  }

  function pct(v) {
    return v === null || v === undefined ? "–" : `${fmt(100 * v, 1)} %`;
  }

  function sloText(slo) {
    const parts = Object.entries(slo || {}).map(([m, ms]) => `${m}≤${fmt(ms, 0)}`);
    return parts.length ? parts.join(" ") : "none";
  }

  // Traffic classes: each judged by its own SLO; fairness is Jain's index of goodput / weight.
  function classesTable(cl) {
    const per = cl.per_class || {};
    const rows = (cl.order || Object.keys(per)).map((name) => [name, per[name]]).map(([name, c]) => [name, pct(c.weight_share),
      fmt(c.requests, 0), fmt(c.failed, 0), fmt(c.output_throughput), pct(c.output_token_share),
      fmt(c.p50_ttft_ms, 2), fmt(c.p99_ttft_ms, 2), fmt(c.p50_tpot_ms, 2), fmt(c.p99_tpot_ms, 2),
      fmt(c.p50_e2el_ms, 2), fmt(c.p99_e2el_ms, 2), sloText(c.slo_ms), fmt(c.good, 0), fmt(c.request_goodput, 2),
      pct(c.good_fraction)]);
    const jain = (cl.fairness || {}).jain_index;
    return [
      el("h3", {}, "Traffic classes"),
      table(["class", "weight share", "requests", "failed", "tok/s", "token share", "TTFT p50 ms", "TTFT p99 ms",
        "TPOT p50 ms", "TPOT p99 ms", "E2EL p50 ms", "E2EL p99 ms", "SLO (ms)", "good", "goodput req/s",
        "good %"], rows, "classes"),
      el("div", { class: "llm-muted", "data-llm": "fairness" },
        `Jain's fairness index of goodput / weight: ${fmt(jain, 3)} (1 = every class got its weight's share)`),
    ];
  }

  // A fleet (two or more endpoints or replicas): which one was slow. Live: counts so far, tok/s of the last 2 s,
  // latency from the merged histograms; once ended: result.json's per_endpoint / per_replica figures.
  function fleetTable(block, title, what, key) {
    const groups = block.groups || {};
    const over = { interval: " (last 2 s)", run: " (over the run)", result: "" }[block.over] || "";
    const rows = (block.order || Object.keys(groups)).map((name) => {
      const g = groups[name] || {};
      return [name, fmt(g.requests, 0), fmt(g.completed, 0), fmt(g.failed, 0), fmt(g.output_throughput),
        fmt(g.p50_ttft_ms, 2), fmt(g.p99_ttft_ms, 2), fmt(g.p50_tpot_ms, 2)];
    });
    const out = [
      el("h3", {}, title + (block.over === "result" ? " (as in result.json)" : "")),
      table([what, "requests", "completed", "failed", `tok/s${over}`, "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms"],
        rows, key),
    ];
    if (block.unnamed) {
      out.push(el("div", { class: "llm-muted", "data-llm": `${key}-unnamed` },
        `${fmt(block.unnamed, 0)} requests named no replica (no answer, or no such header)`));
    }
    return out;
  }

  // The rate control lives across re-renders (a value being typed must survive the 2-s refresh).
  let rateBox = null;
  function rateControl(target) {
    if (!rateBox) {
      const input = el("input", { type: "number", min: "0.01", step: "any", id: "llm-rate-input",
                                  value: target === null ? "" : String(target) });
      const msg = el("span", { class: "llm-muted", id: "llm-rate-msg" }, "");
      const button = el("button", { id: "llm-rate-button", type: "button" }, "Set request rate (req/s)");
      button.onclick = () => setRate(input.value, msg);
      rateBox = el("div", { class: "llm-row" }, [input, button, msg]);
    }
    return rateBox;
  }

  async function setRate(value, msg) {
    const body = new URLSearchParams({ rate: value });
    const r = await fetch("./llm/rate", { method: "POST", body });
    const j = await r.json();
    msg.textContent = j.message;
    poll();
  }

  async function poll() {
    if (!panel || !onTab()) return;
    try {
      const r = await fetch("./llm/stats", { cache: "no-store" });
      if (r.ok) render(await r.json());
    } catch (e) {
      panel.setAttribute("data-error", String(e));
    }
  }

  function anchor() {
    // Locust's extended table of this tab (its header names TTFT); the panel goes right below it
    for (const th of document.querySelectorAll("#root table th")) {
      if (th.textContent.startsWith("TTFT p50")) {
        const t = th.closest("table");
        return t.closest(".MuiTableContainer-root") || t.parentElement;
      }
    }
    return null;
  }

  function place() {
    if (!panel) {
      panel = el("div", { id: "llm-panel" });
      document.head.appendChild(el("style", {}, CSS));
    }
    const show = onTab();
    const at = show ? anchor() : null;
    if (at && at.nextSibling !== panel) at.after(panel);  // re-placed if React re-rendered the tab
    panel.style.display = at ? "block" : "none";
    if (at && !timer) { poll(); timer = setInterval(poll, POLL_MS); }
    if (!at && timer) { clearInterval(timer); timer = null; }
  }

  const CSS = `
  #llm-panel { padding: 8px 24px 24px; font-family: Roboto, Helvetica, Arial, sans-serif; font-size: 14px; }
  .llm-status { margin: 4px 0 10px; color: #666; }
  .llm-cards { display: flex; flex-wrap: wrap; gap: 10px; margin-bottom: 12px; }
  .llm-card { border: 1px solid #ccc; border-radius: 6px; padding: 8px 14px; min-width: 110px; }
  .llm-label { font-size: 12px; color: #666; }
  .llm-value { font-size: 22px; font-weight: 500; }
  .llm-charts { display: flex; flex-wrap: wrap; gap: 12px; }
  .llm-chart { width: 460px; height: 170px; border: 1px solid #ddd; border-radius: 6px; }
  .llm-chart-title { font-size: 12px; font-weight: 500; fill: currentColor; }
  .llm-axis { stroke: #999; stroke-width: 1; }
  .llm-tick, .llm-legend, .llm-marker-label { font-size: 10px; fill: #777; }
  .llm-legend { font-weight: 500; }
  .llm-marker { stroke: #8e24aa; stroke-dasharray: 3 3; }
  .llm-marker-label { fill: #8e24aa; }
  .llm-muted { color: #888; fill: #888; font-size: 12px; }
  .llm-side h3 { font-size: 15px; margin: 14px 0 4px; }
  .llm-table { border-collapse: collapse; }
  .llm-table th, .llm-table td { border-bottom: 1px solid #ddd; padding: 3px 10px; text-align: right; }
  .llm-table th:first-child, .llm-table td:first-child { text-align: left; }
  .llm-table td { white-space: nowrap; }
  .llm-row { display: flex; gap: 8px; align-items: center; margin-top: 6px; }
  @media (prefers-color-scheme: dark) { #llm-panel { color: #eee; } }
  `;

  setInterval(place, 300);
  window.addEventListener("popstate", place);
  place();
})();
