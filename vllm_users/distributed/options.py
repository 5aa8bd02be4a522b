"""The option groups of the distributed run: the load, the processes, the master's live Prometheus export, and
what `vllm-locust run` or the master hands the Locust processes."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from vllm_users import option_types as T
from vllm_users.errors import UsageError
from vllm_users.option_spec import BOTH, LOCUST, RUN, WORKER, opt


class Headers(Mapping[str, str]):
    """A read-only, hashable header: value mapping (an option value: Options is frozen)."""

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        self._d = dict(items or {})

    def __getitem__(self, key: str) -> str:
        return self._d[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        return hash(tuple(self._d.items()))

    def __repr__(self) -> str:
        return f"Headers({self._d!r})"


NO_HEADERS = Headers()


def headers_json(headers: Mapping[str, str]) -> str:
    """Headers as the JSON text they travel in to the Locust processes ("" for none)."""
    return json.dumps(dict(headers)) if headers else ""


def headers_from_json(text: str) -> Headers:
    """The hidden `extra_headers` option's value: a JSON object of header: value, parsed once, read-only."""
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a JSON object of headers: {e}") from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise argparse.ArgumentTypeError("not a JSON object of header: value strings")
    return Headers(value)


@dataclass(frozen=True)
class LoadOptions:
    """The load: closed-loop users or an open-loop rate, its ramp, and how long."""

    users: int | None = opt(None, T.pos_int, "Closed loop: concurrent users (default 8)", RUN, short="-u")
    spawn_rate: float | None = opt(None, T.pos_float, "Users started per second", RUN, short="-r")
    request_rate: float | None = opt(
        None, T.rate, "Open loop: requests/s over all workers (or inf; none or 0: closed loop)", *BOTH
    )
    burstiness: float = opt(
        1.0,
        T.pos_float,
        "Gamma shape of inter-arrivals: 1 = Poisson, <1 burstier, inf = constant intervals 1/rate",
        *BOTH,
    )
    max_concurrency: int | None = opt(
        None, T.pos_int, "Cap on in-flight requests over all workers (open loop)", *BOTH
    )
    num_prompts: int | None = opt(
        None,
        T.pos_int,
        "Total requests (or sessions) over all workers (run: default "
        "200 without --run-time; locust: until --run-time)",
        *BOTH,
    )
    run_time: float | None = opt(
        None, T.duration, "Stop after this long (30s, 5m; web UI: from the first swarm)", RUN, short="-t"
    )
    ramp_up_strategy: str | None = opt(
        None,
        T.text,
        "Open loop: ramp the rate from --ramp-up-start-rps to "
        "--ramp-up-end-rps over --num-prompts requests, as vllm bench serve does",
        *BOTH,
        choices=("linear", "exponential"),
    )
    ramp_up_start_rps: float | None = opt(None, T.pos_float, "Ramp: rate of the first request", *BOTH)
    ramp_up_end_rps: float | None = opt(None, T.pos_float, "Ramp: rate of the last request", *BOTH)
    stop_after_failing: float | None = opt(
        None,
        T.duration,
        "Stop the run once every request has failed, and none succeeded, for this long (a server gone away: "
        "what was measured is kept; docs/failure_kinds.md); none: run on",
        *BOTH,
    )

    def check(self) -> None:
        """The load's rules (UsageError with one line): the ramp's, then the loop's."""
        self._check_ramp()
        self._check_loop()

    def _check_ramp(self) -> None:
        """A ramp needs its two rates and --num-prompts; its request_rate may already be its end rate (a run
        sets it so, and every Options built from that one checks it again)."""
        if self.ramp_up_strategy is not None:
            if self.ramp_up_start_rps is None or self.ramp_up_end_rps is None:
                raise UsageError("--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps")
            if self.ramp_up_start_rps > self.ramp_up_end_rps:
                raise UsageError("--ramp-up-start-rps must not exceed --ramp-up-end-rps")
            if (
                self.request_rate is not None and self.request_rate != self.ramp_up_end_rps
            ) or self.users is not None:
                raise UsageError("--ramp-up-strategy sets the rate: leave out --request-rate and --users")
            if self.num_prompts is None:
                raise UsageError("--ramp-up-strategy ramps over --num-prompts requests: give --num-prompts")
        elif self.ramp_up_start_rps is not None or self.ramp_up_end_rps is not None:
            raise UsageError(
                "--ramp-up-start-rps/--ramp-up-end-rps need --ramp-up-strategy linear|exponential"
            )

    def _check_loop(self) -> None:
        """Closed loop (--users) or open loop (--request-rate), not both; what each needs (UsageError)."""
        if self.request_rate is not None and self.users is not None:
            raise UsageError("--users is for closed loop and --request-rate for open loop: give one of them")
        if self.max_concurrency is not None and self.request_rate is None and self.users is not None:
            raise UsageError(
                "--max-concurrency caps an open-loop run: use it with --request-rate (or use --users)"
            )
        if self.request_rate is not None and math.isinf(self.request_rate) and self.num_prompts is None:
            raise UsageError("--request-rate inf needs --num-prompts")


@dataclass(frozen=True)
class ProcessOptions:
    """The processes: local and remote workers, the master, Locust's web UI."""

    workers: int | None = opt(None, T.nonneg_int, "Local worker processes (default: one per core)", RUN)
    expect_workers: int | None = opt(None, T.pos_int, "Wait for this many workers (remote too)", RUN)
    master_bind_host: str = opt("127.0.0.1", T.text, "Where remote workers connect", RUN)
    master_host: str = opt("", T.text, "Address of the `vllm-locust run` master (required)", WORKER)
    master_port: int | None = opt(None, T.pos_int, "Master port (run: a free one; worker: 5557)", RUN, WORKER)
    processes: int = opt(1, T.pos_int, "Worker processes on this host", WORKER)
    web_ui: bool = opt(False, None, "Locust's web UI for live ramping instead of headless", RUN)
    web_port: int = opt(8089, T.port, "Port of the web UI", RUN)
    web_host: str = opt("127.0.0.1", T.text, "Interface of the web UI (default: this machine only)", RUN)
    web_login: bool = opt(
        False,
        None,
        "Locust's --web-login: one user, password from VLLM_LOCUST_WEB_PASSWORD (docs/web_ui.md)",
        RUN,
    )
    web_open: bool = opt(
        False,
        None,
        "Accept a --web-host beyond this machine without --web-login: anyone who reaches it can start, stop "
        "or change the load",
        RUN,
    )

    def check(self) -> None:
        """Remote workers only: --workers 0 needs --expect-workers; a web UI open to the network needs
        --web-login or --web-open (UsageError)."""
        if self.workers == 0 and not self.expect_workers:
            raise UsageError("--workers 0 needs --expect-workers N (remote workers)")
        if self.web_ui and not self.web_login and not self.web_open and not is_loopback(self.web_host):
            raise UsageError(
                f"--web-host {self.web_host} opens the web UI to the network without a login: add --web-login "
                "(password in VLLM_LOCUST_WEB_PASSWORD), or --web-open to accept that anyone who reaches it "
                "can start, stop or change the load"
            )


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name) is this machine only: localhost, 127.0.0.0/8, ::1."""
    import ipaddress

    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:  # another name: it may resolve to any interface
        return False


def web_access(host: str, login: bool) -> str:
    """Who can reach the web UI, in the LLM tab's words."""
    if is_loopback(host):
        return f"this machine only ({host})"
    if login:
        return f"the network ({host}), behind --web-login"
    return f"the network ({host}) with no login: anyone who reaches it can start, stop or change the load"


@dataclass(frozen=True)
class PrometheusOptions:
    """The master's live /metrics for Prometheus (vllm_users.distributed.views.prometheus_export)."""

    prometheus_port: int | None = opt(
        None,
        T.port,
        "Serve live metrics at http://MASTER:PORT/metrics for "
        "Prometheus and Grafana, from the master (docs/prometheus.md)",
        *BOTH,
        metavar="PORT",
        web_ui=False,
    )


@dataclass(frozen=True)
class HandoffOptions:
    """Set by `vllm-locust run` or the master, for the Locust processes."""

    results_dir: str = opt(
        "", T.text, "Run directory the master writes records and results into", LOCUST, web_ui=False
    )
    extra_headers: Headers = opt(
        NO_HEADERS,
        headers_from_json,
        "JSON object of extra request headers",
        LOCUST,
        web_ui=False,
        secret=True,
        text=headers_json,
    )
    vllm_worker_count: int = opt(0, T.nonneg_int, "(set by the master)", LOCUST, web_ui=False)
    vllm_embedded_sim: bool = opt(
        False,
        None,
        "(set by `vllm-locust run`) the host is its embedded simulator: "
        "the result cross-checks the requests it served",
        LOCUST,
        web_ui=False,
    )
    vllm_lengths: str = opt(
        "",
        T.text,
        "(set by `vllm-locust run`'s preflight, or a plain master at test start) the "
        "prompt-length calibration as JSON: workers use it and send no probes",
        LOCUST,
        web_ui=False,
    )
