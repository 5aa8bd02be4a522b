"""The "LLM" tab of Locust's web UI, built on Locust's extension points (examples/extend_web_ui.py).

- an extended tab and table in `web_ui.template_args`, fed through `extended_stats` of /stats/requests
  (Locust's UI polls it every 2 s): exact TTFT/TPOT/ITL/E2EL p50/p90/p99 per scenario and in total;
- Flask routes on `web_ui.app` under /llm/: the live snapshot (JSON), the live request-rate change, the
  HTML report of the run so far, and a small script (package data, no network) that draws the rest of the
  tab (rates, goodput, errors, client health, arrivals, server metrics, charts with change markers);
- no credential leaves: every response of the UI is scrubbed of the API key, --header's credentials and the
  /metrics scrape's, as a last line of defence.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import tempfile
from typing import Any, Protocol

from locust.env import Environment

from vllm_users import run_dir
from vllm_users.distributed import env_state
from vllm_users.distributed.options import web_access
from vllm_users.distributed.transport.master_side import Collector
from vllm_users.distributed.views.live import LiveView, finite, table_rows
from vllm_users.measure.histograms import HIST_METRICS
from vllm_users.options import API_KEY_ENV, METRICS_HEADERS_ENV, METRICS_HEADERS_MORE_ENV
from vllm_users.redact import Redactor, secret_values

log = logging.getLogger("vllm_locust")

TAB = "llm"
STATIC_DIR = os.path.join(os.path.dirname(__file__), "static")
SCRIPT = "llm_tab.js"
TABLE = [{"key": "name", "title": "Scenario"}, {"key": "requests", "title": "OK requests"}] + [
    {"key": f"{m}_{p}", "title": f"{m.upper()} {p} (ms)"} for m in HIST_METRICS for p in ("p50", "p90", "p99")
]


class MasterView(Protocol):
    """What the tab reads of the master's plugin (vllm_users.distributed.master_plugin.MasterPlugin, which
    installs the tab: a Protocol keeps the import one way)."""

    collector: Collector | None
    live: LiveView | None
    results_dir: str
    written: bool

    def on_swarm(self, users: str | None, spawn_rate: str | None) -> None:
        """Users or spawn rate of the running swarm changed from the UI's form."""

    def change_rate(self, rate: float) -> tuple[bool, str]:
        """A live request-rate change: (accepted, message)."""


def install(env: Environment, plugin: MasterView) -> None:
    """Add the LLM tab, its routes and the API-key scrubber to the running web UI (master or local runner)."""
    from flask import Blueprint, Response, g, jsonify, make_response, request, send_file

    web_ui = env.web_ui
    assert web_ui is not None and web_ui.app is not None
    app = web_ui.app
    auth = web_ui.auth_required_if_enabled
    web_ui.template_args["extended_tabs"] = [{"title": "LLM", "key": TAB}]
    web_ui.template_args["extended_tables"] = [{"key": TAB, "structure": TABLE}]
    web_ui.template_args["extended_csv_files"] = [
        {"href": "./llm/report", "title": "Download the LLM report (HTML, run so far)"},
        {"href": "./llm/stats", "title": "Download the LLM live numbers (JSON)"},
    ]
    bp = Blueprint("vllm_llm", __name__, static_folder=STATIC_DIR, static_url_path="/llm/static")

    def live() -> LiveView | None:
        return plugin.live

    parsed = env.parsed_options
    # who can reach this UI (the LLM tab says it); Locust's own default, an empty --web-host, is every interface
    access = web_access(
        str(getattr(parsed, "web_host", "") or "*"), bool(getattr(parsed, "web_login", False))
    )

    @bp.route("/llm/stats")
    @auth
    def stats() -> Response:
        view = live()
        snap = view.last if view is not None and view.last is not None else {"state": "ready", "latency": {}}
        return jsonify(finite({**snap, "access": access}))

    @bp.route("/llm/rate", methods=["POST"])
    @auth
    def rate() -> Response:
        raw: Any = request.form.get("rate") or (request.get_json(silent=True) or {}).get("rate")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            return jsonify({"success": False, "message": "rate: expected a number of requests/s"})
        ok, message = plugin.change_rate(value)
        return jsonify({"success": ok, "message": message})

    @bp.route("/llm/report")
    @auth
    def report() -> Response:
        path, err = _report_so_far(plugin)
        if path is None:
            return make_response(f"report not available: {err}", 503)
        return send_file(
            path, mimetype="text/html", as_attachment=True, download_name=run_dir.WEB_REPORT_HTML
        )

    app.register_blueprint(bp)
    _password_login(web_ui)
    o = env_state.options(
        env
    )  # every credential the process holds: the key, --header's, the /metrics scrape's
    redactor = Redactor(
        [
            *(os.environ[k] for k in (*API_KEY_ENV, WEB_PASSWORD_ENV) if os.environ.get(k)),
            *secret_values(dict(o.handoff.extra_headers), urls=(env.host or "").split(",")),
            *secret_values(json.loads(os.environ.get(METRICS_HEADERS_ENV) or "{}")),
            *(
                v
                for h in json.loads(os.environ.get(METRICS_HEADERS_MORE_ENV) or "{}").values()
                for v in secret_values(h)
            ),
        ]
    )

    @app.before_request
    def refuse_second_run() -> Any:
        if not (request.path.endswith("/swarm") and request.method == "POST"):
            return None
        # an edit of a running swarm, judged before Locust spawns the start: judged after the response, the
        # start's own greenlet could have run by then on a busy master and made the start read as an edit
        g.swarm_edit = plugin.collector is not None
        if plugin.written:
            return jsonify(
                {
                    "success": False,
                    "message": f"this run is finished (results in {plugin.results_dir}); "
                    "start another `vllm-locust run` for a new one",
                }
            )
        return None

    @app.after_request
    def extend(response: Response) -> Response:
        if request.path.endswith("/stats/requests") and response.is_json and live() is not None:
            data = response.get_json()
            view = live()
            assert view is not None
            rows = table_rows(view.last["latency"]) if view.last else []
            data["extended_stats"] = [{"key": TAB, "data": rows}]
            if (
                data.get("state") in ("stopping", "stopped")
                and plugin.collector is not None
                and not (view.last or {}).get("finished")
            ):
                # Locust's UI polls only while it reads "spawning" or "running": until the final snapshot is in
                # (in-flight streams drained, the run written) say "running", which they still are, so that its
                # table ends on the final numbers, not on the last live snapshot (seen: 390 of 400)
                data["state"] = "running"
            response.set_data(json.dumps(finite(data)))
        elif request.path.endswith("/swarm") and request.method == "POST" and response.is_json:
            if (response.get_json() or {}).get("success") and g.get("swarm_edit"):
                plugin.on_swarm(request.form.get("user_count"), request.form.get("spawn_rate"))
        elif (
            request.path in ("/", "") and response.mimetype == "text/html" and not response.direct_passthrough
        ):
            html = response.get_data(as_text=True)
            tag = f'<script src="./llm/static/{SCRIPT}"></script>'
            response.set_data(html.replace("</body>", tag + "</body>", 1))
        if redactor.secrets and not response.direct_passthrough and response.mimetype in _TEXT:
            response.set_data(redactor.data(response.get_data()))
        return response


WEB_USER_ENV, WEB_PASSWORD_ENV = "VLLM_LOCUST_WEB_USER", "VLLM_LOCUST_WEB_PASSWORD"


def _password_login(web_ui: Any) -> None:
    """--web-login with one user from the environment (VLLM_LOCUST_WEB_USER, default admin, and
    VLLM_LOCUST_WEB_PASSWORD) on Locust's own login page; without a password Locust's --web-login is
    left to a locustfile's own logic, as Locust documents."""
    password = os.environ.get(WEB_PASSWORD_ENV)
    if not web_ui.web_login or not password:
        return
    import hmac

    from flask import redirect, request, session, url_for
    from flask_login import UserMixin, login_user

    user = os.environ.get(WEB_USER_ENV) or "admin"

    class _User(UserMixin):
        def __init__(self, uid: str) -> None:
            self.id = uid

    app = web_ui.app
    app.secret_key = os.urandom(32)  # sessions end with the run
    web_ui.login_manager.user_loader(lambda uid: _User(uid) if uid == user else None)
    web_ui.auth_args = {"username_password_callback": "/llm/login_submit"}

    @app.route("/llm/login_submit", methods=["POST"])
    def login_submit() -> Any:
        ok = hmac.compare_digest(request.form.get("username", ""), user)
        ok &= hmac.compare_digest(request.form.get("password", "").encode(), password.encode())
        if ok:
            login_user(_User(user))
            return redirect(url_for("locust.index"))
        session["auth_error"] = "Invalid username or password"
        return redirect(url_for("locust.login"))


_TEXT = {
    "text/html",
    "application/json",
    "text/csv",
    "text/plain",
    "application/javascript",
    "text/javascript",
}


def _report_so_far(plugin: MasterView) -> tuple[str | None, str]:
    """Render our HTML report of the run directory as it is now, in a subprocess (the master's loop keeps going)."""
    from gevent import subprocess

    if plugin.collector is None:
        return None, "the test has not started"
    plugin.collector.flush()
    out = tempfile.mkdtemp(prefix="vllm-locust-ui-report-")
    env = {k: v for k, v in os.environ.items() if k not in API_KEY_ENV}
    # a process of its own, not a call: rendering the report's matplotlib plots takes seconds of CPU, which in
    # the master would stall its gevent loop (worker heartbeats, batches, the live stats this UI polls); the
    # report lives in orchestration/, above vllm_users, so it is named by module, not imported
    cmd = [sys.executable, "-m", "orchestration.commands.report", plugin.results_dir]
    cmd += ["-o", out, "--format", "html", "--quiet"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        return None, "the report took longer than 120 s"
    path = run_dir.path(out, run_dir.REPORT_HTML)
    if p.returncode != 0 or not os.path.exists(path):
        return None, (p.stderr or "").strip()[-300:] or f"exit code {p.returncode}"
    return path, ""


def parse_rate(value: float) -> str | None:
    """None when `value` is a usable live request rate, else why not."""
    if not math.isfinite(value) or value <= 0:
        return f"rate {value}: expected a finite number of requests/s > 0"
    return None
