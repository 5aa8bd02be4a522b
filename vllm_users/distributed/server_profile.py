"""`--profile`: vLLM's POST /start_profile and /stop_profile around the measured window.

The server must run with its profiler on: vLLM 0.32 takes `--profiler-config '{"profiler": "torch",
"torch_profiler_dir": "/traces"}'` (older versions: env VLLM_TORCH_PROFILER_DIR). Without it vLLM has no
/start_profile route (404): the run goes on and the result says so. Profiling starts when the load starts
(after a time-based --warmup, when there is one) and stops when the load ends; the traces are written by
the server, into its directory, while /stop_profile answers.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from vllm_users.client import stdlib_http

STOP_TIMEOUT_S = 600.0  # writing the traces can take minutes on CPU


def _post(url: str, headers: Mapping[str, str] | None, timeout: float) -> tuple[int | None, str]:
    req = urllib.request.Request(
        url, data=b"{}", method="POST", headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with stdlib_http.urlopen(req, timeout=timeout) as r:  # interim 1xx responses skipped
            return int(r.status), ""
    except urllib.error.HTTPError as e:
        return int(e.code), f"HTTP {e.code}"
    except (OSError, ValueError) as e:
        return None, f"{type(e).__name__}: {e}"


class ServerProfile:
    """Start the server's profiler (now or after `delay_s`, in a thread) and stop it; `report()` for the result."""

    def __init__(self, host: str, headers: Mapping[str, str] | None, delay_s: float = 0.0) -> None:
        self.base = host.rstrip("/")
        self.headers = dict(headers or {})  # the run's: --header and the API key
        self.delay_s = delay_s
        self.info: dict[str, Any] = {"requested": True, "delay_s": delay_s}
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()

    def start(self) -> None:
        """POST /start_profile, at once or after the warm-up delay."""
        if self.delay_s > 0:
            self._thread = threading.Thread(target=self._start_later, daemon=True)
            self._thread.start()
        else:
            self._start_now()

    def _start_later(self) -> None:
        if not self._cancel.wait(self.delay_s):
            self._start_now()

    def _start_now(self) -> None:
        status, err = _post(self.base + "/start_profile", self.headers, 60.0)
        self.info.update(start_status=status, started_at=time.time())
        if status != 200:
            self.info["error"] = err + (
                ": the server has no profiler on (vLLM: --profiler-config "
                '\'{"profiler": "torch", "torch_profiler_dir": DIR}\')'
                if status == 404
                else ""
            )

    def stop(self) -> dict[str, Any]:
        """POST /stop_profile (when the start succeeded); returns the result's `profile` block."""
        self._cancel.set()
        if self._thread is not None:
            self._thread.join(timeout=65.0)
        if self.info.get("start_status") == 200:
            t0 = time.time()
            status, err = _post(self.base + "/stop_profile", self.headers, STOP_TIMEOUT_S)
            self.info.update(
                stop_status=status, stopped_at=time.time(), stop_took_s=round(time.time() - t0, 3)
            )
            if status != 200:
                self.info["error"] = err
        elif "start_status" not in self.info:
            self.info["error"] = "the load ended before the warm-up did: the profiler was never started"
        self.info["profiled"] = self.info.get("stop_status") == 200
        return self.info


def profile_line(info: Mapping[str, Any]) -> str:
    """One line on what --profile did (the master's log and the run's console say the same)."""
    return "server profile: " + (
        "traces written by the server" if info.get("profiled") else str(info.get("error", "?"))
    )
