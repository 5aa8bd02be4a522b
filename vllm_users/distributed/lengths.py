"""The run's one prompt-length calibration, where no `vllm-locust run` preflight handed one in: a plain `locust -f`
master (or local runner) calibrates at its test start, before the schedule's origin is set, and ships the table to
its workers in the spawn message (the `vllm_lengths` option, as the preflight's travels). The workers then send
no probes; a worker that still finds none calibrates itself, bounded (vllm_users.scenarios.base).
"""

from __future__ import annotations

import json
import logging

from locust.env import Environment

from vllm_users.client.endpoints import primary_host
from vllm_users.distributed import env_state
from vllm_users.model_mix import model_names
from vllm_users.options import env_api_key
from vllm_users.redact import connection_headers
from vllm_users.workload.calibrate_url import calibrate_url, resolve_model

__all__ = ["calibrate_once"]

log = logging.getLogger("vllm_locust")


def calibrate_once(env: Environment) -> None:
    """Calibrate prompt lengths against `env.host` into the options the workers receive, unless the options carry a
    calibration already, no user class takes one (ours have `length_model`), or the model cannot be named."""
    ns = env.parsed_options
    if ns is None or vars(ns).get("vllm_lengths") or not env.host:
        return
    if not any(callable(getattr(u, "length_model", None)) for u in env.user_classes):
        return
    o = env_state.options(env)
    # several --host URLs: they serve one model, calibrated on the first
    host, headers = connection_headers(primary_host(env.host), dict(o.handoff.extra_headers), env_api_key())
    # a mix: its base model
    model = model_names(o.server.model)[0] if o.server.model else resolve_model(host, headers)
    if model is None:  # the users report it (they resolve the model themselves)
        return
    templated = o.scenario.endpoint in ("chat", "responses")  # both apply the chat template
    lm = calibrate_url(host, model, templated, headers)
    lm.probes["where"] = "master"
    p = lm.probes
    log.info(
        "vllm-locust: prompt lengths: %s, calibrated with %s probes in %.2f s",
        lm.source,
        p.get("requests"),
        p.get("seconds", 0.0),
    )
    if lm.warning:
        log.warning("vllm-locust: %s", lm.warning)
    ns.vllm_lengths = json.dumps(lm.to_table(), separators=(",", ":"))
