"""--web-login: with VLLM_LOCUST_WEB_PASSWORD set, Locust's login page guards every page and our routes."""

from __future__ import annotations

import http.cookiejar
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from orchestration.launch.ports import free_port


@pytest.mark.timeout(120)
def test_login_guards_the_llm_routes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    env = {**os.environ, "VLLM_LOCUST_WEB_USER": "ops", "VLLM_LOCUST_WEB_PASSWORD": "pw-7d1f"}
    cmd = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "run",
        "--web-ui",
        "--web-login",
        "--web-port",
        str(port),
        "--workers",
        "1",
        "--output-dir",
        str(tmp_path),
        "--run-name",
        "r",
        "--no-report",
    ]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))

    def get(path: str, form: dict[str, str] | None = None) -> tuple[str, str]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        with opener.open(base + path, data=data, timeout=10) as resp:
            return resp.geturl(), resp.read().decode()

    try:
        deadline = time.time() + 60
        while True:
            try:
                url, _ = get("/llm/stats")
                break
            except (urllib.error.URLError, OSError):
                if time.time() > deadline:
                    raise
                time.sleep(0.5)
        assert "/login" in url  # sent to the login page, no numbers
        url, _ = get("/llm/login_submit", {"username": "ops", "password": "wrong"})
        assert urllib.parse.urlparse(url).path == "/login"
        assert urllib.parse.urlparse(get("/llm/stats")[0]).path == "/login"
        get("/llm/login_submit", {"username": "ops", "password": "pw-7d1f"})
        url, body = get("/llm/stats")
        assert url.endswith("/llm/stats") and json.loads(body)["state"] == "ready"
        assert json.loads(body)["access"] == "this machine only (127.0.0.1)"  # the LLM tab shows it
        assert "pw-7d1f" not in get("/")[1]
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(60)
