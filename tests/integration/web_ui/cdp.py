"""A headless Chromium driven through the Chrome DevTools Protocol (no Playwright, nothing downloaded)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from typing import Any

import simple_websocket  # a Locust dependency (python-engineio's websocket client)

CHROMIUM = next(
    (shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
]


class Browser:
    """One Chromium process with a fresh profile and one page; a context manager."""

    def __init__(self, width: int = 1500, height: int = 1900, shot_on_error: str = "") -> None:
        assert CHROMIUM is not None
        self.shot_on_error = shot_on_error  # a screenshot of the page when the `with` block fails
        self.profile = tempfile.mkdtemp(prefix="vllm-locust-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port = self._devtools_port()
        deadline = time.time() + 20
        pages: list[dict[str, Any]] = []
        while time.time() < deadline and not pages:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as resp:
                pages = [t for t in json.load(resp) if t.get("type") == "page"]
            time.sleep(0.1)
        self.ws = simple_websocket.Client.connect(pages[0]["webSocketDebuggerUrl"])
        self._id = 0
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def _devtools_port(self) -> int:
        path = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with open(path) as fh:
                    return int(fh.readline())
            except (OSError, ValueError):
                time.sleep(0.1)
        raise RuntimeError("chromium did not open its DevTools port")

    def call(self, method: str, timeout: float = 30, **params: Any) -> dict[str, Any]:
        """Send one DevTools command and return its result (events in between are skipped)."""
        self._id += 1
        my = self._id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        deadline = time.time() + timeout
        while time.time() < deadline:
            raw = self.ws.receive(timeout=max(0.1, deadline - time.time()))
            if raw is None:
                continue
            msg = json.loads(raw)
            if msg.get("id") == my:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result", {}))
        raise TimeoutError(method)

    def js(self, expression: str, timeout: float = 30) -> Any:
        """Evaluate in the page (promises awaited) and return the value."""
        r = self.call(
            "Runtime.evaluate", timeout=timeout, expression=expression, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in r:
            raise RuntimeError(f"page error: {r['exceptionDetails']}")
        return r.get("result", {}).get("value")

    def goto(self, url: str) -> None:
        """Navigate and wait for the document to load."""
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete'")

    def wait_for(self, expression: str, timeout: float = 30) -> Any:
        """Poll a JS expression until it is truthy; its value."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                v = self.js(expression)
            except RuntimeError:
                v = None
            if v:
                return v
            time.sleep(0.2)
        raise TimeoutError(f"page never satisfied: {expression}")

    def click(self, element_js: str) -> None:
        """A real mouse click (pressed, released) at the centre of the element `element_js` evaluates to."""
        box = self.wait_for(
            f"(() => {{ const e = {element_js}; if (!e) return null; e.scrollIntoView({{block: 'center'}});"
            " const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def screenshot(self, path: str) -> str:
        """A PNG of the page as it is now."""
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        with open(path, "wb") as fh:
            fh.write(base64.b64decode(data))
        return path

    def close(self) -> None:
        """End the browser and remove its profile."""
        try:
            self.ws.close()
        except Exception:  # noqa: BLE001 - the browser may be gone already
            pass
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, et: Any, *_: Any) -> None:
        if et is not None and self.shot_on_error:
            try:
                self.screenshot(self.shot_on_error)
            except Exception:  # noqa: BLE001 - the failure being raised matters more
                pass
        self.close()
