"""`vllm-locust k8s wait`: block until the target's /health answers 200 (the pods' initContainer)."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence

from orchestration.commands import reported
from orchestration.k8s.tls import config_tls
from orchestration.settings import config as C
from vllm_users.client import stdlib_http, tls
from vllm_users.client.endpoints import fleet_connection
from vllm_users.errors import PreflightError
from vllm_users.options import env_api_key, env_name
from vllm_users.redact import header_lines

__all__ = ["healthy", "main", "target_host"]


def target_host(host: str | None, config: str | None) -> str:
    """The target URL: --host, else env VLLM_LOCUST_HOST, else the config file's `host` (UsageError if none)."""
    url = (
        host or os.environ.get("VLLM_LOCUST_HOST") or (C.load_config(config).get("host") if config else None)
    )
    if not url or not str(url).startswith(("http://", "https://")):
        raise C.UsageError(f"no target URL (--host, VLLM_LOCUST_HOST or the config's host): got {url!r}")
    return str(url).rstrip("/")


def run_headers(config: str | None) -> list[str]:
    """The run's --header lines: env VLLM_LOCUST_HEADER (the pods' Secret vllm-locust-header), else the config's."""
    given = os.environ.get(env_name("header"))
    if given:
        return [given]
    raw = C.load_config(config).get("header") if config else None
    return [str(h) for h in raw] if isinstance(raw, list) else [str(raw)] if raw else []


def healthy(url: str, timeout: float, headers: Mapping[str, str] | None = None) -> str:
    """'' when GET url (with `headers`: the run's credentials) answers 200, else one line saying what came back."""
    try:
        req = urllib.request.Request(url, headers=dict(headers or {}))
        with stdlib_http.urlopen(req, timeout=timeout) as resp:  # interim 1xx skipped
            return "" if resp.status == 200 else f"HTTP {resp.status}"
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}"
    except (OSError, ValueError) as e:
        return str(getattr(e, "reason", None) or e) or type(e).__name__


@reported("vllm-locust k8s wait")
def main(argv: Sequence[str]) -> int:
    """Poll HOST/health every --interval seconds until 200 (exit 0) or --timeout (exit PREFLIGHT); a fleet's
    every URL in turn, all within the one --timeout."""
    p = C.OneLineParser(prog="vllm-locust k8s wait")
    p.add_argument("--host", help="Target base URL(s) (default: env VLLM_LOCUST_HOST, else --config's host)")
    p.add_argument("--config", help="The run's options file (its `host`)")
    p.add_argument("--path", default="/health", help="Readiness path (vLLM: /health)")
    p.add_argument("--timeout", type=C.pos_float, default=900.0, help="Give up after this many seconds")
    p.add_argument("--interval", type=C.pos_float, default=2.0, help="Seconds between attempts")
    a = p.parse_args(list(argv))
    # several URLs (a fleet's replicas, comma-separated): the run's preflight checks every one, so each must
    # be up before the pods start; credentials in the URLs become the shared headers, as `run` makes them
    hosts, headers = fleet_connection(
        target_host(a.host, a.config), header_lines(run_headers(a.config)), env_api_key()
    )
    tls.configure(config_tls(a.config))  # https: the run's CA bundle / --insecure / client certificate
    t0 = time.monotonic()
    for host in hosts.split(","):
        _wait_one(host + a.path, headers, a.interval, a.timeout, t0)
    return 0


def _wait_one(url: str, headers: Mapping[str, str], interval: float, timeout: float, t0: float) -> None:
    """Poll `url` until 200; PreflightError once `timeout` seconds since `t0` would pass."""
    last = ""
    while True:
        why = healthy(url, min(10.0, interval * 5), headers)
        waited = time.monotonic() - t0
        if not why:
            print(f"vllm-locust k8s wait: {url} ready after {waited:.1f} s", flush=True)
            return
        if why != last:
            print(f"vllm-locust k8s wait: {url}: {why}; waiting (up to {timeout:.0f} s)", flush=True)
            last = why
        if waited + interval > timeout:
            raise PreflightError(f"{url} not ready after {waited:.0f} s ({why})")
        time.sleep(interval)
