"""The server option group: where the load goes, which model, the API key and TLS."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_users import option_types as T
from vllm_users.errors import UsageError
from vllm_users.option_spec import BOTH, CALIBRATE, RUN, opt
from vllm_users.redact import redact_url


@dataclass(frozen=True)
class ServerOptions:
    """The server: its URL, model, API key and TLS (https:// hosts: the load, the preflight, /metrics,
    calibration; docs/https.md)."""

    host: str = opt(
        "", T.text, "Server base URL, e.g. http://127.0.0.1:8000 (none: start the simulator)", RUN
    )
    model: str = opt(
        "",
        T.text,
        "Served model name (none: the only model of /v1/models); a mix by weight, e.g. "
        "base:3,adapter-a:1 (LoRA adapters; docs/classes.md)",
        *BOTH,
    )
    api_key: str = opt(
        "", T.text, "API key (or env VLLM_LOCUST_API_KEY / OPENAI_API_KEY); never written", RUN, secret=True
    )
    ca_bundle: str = opt(
        "",
        T.text,
        "PEM file of the CAs that sign the server's certificate (default: SSL_CERT_FILE, "
        "else the system's store)",
        *BOTH,
        CALIBRATE,
        metavar="FILE",
        web_ui=False,
    )
    insecure: bool = opt(
        False,
        None,
        "Do not verify the server's certificate (said in the summary and the result)",
        *BOTH,
        CALIBRATE,
        web_ui=False,
    )
    client_cert: str = opt(
        "",
        T.text,
        "PEM client certificate for mTLS (its key in it, or --client-key)",
        *BOTH,
        CALIBRATE,
        metavar="FILE",
        web_ui=False,
    )
    client_key: str = opt(
        "", T.text, "PEM private key of --client-cert", *BOTH, CALIBRATE, metavar="FILE", web_ui=False
    )

    def check(self) -> None:
        """--host, when given, is an http(s) URL (UsageError naming it without its credentials)."""
        if self.host and not self.host.startswith(("http://", "https://")):
            raise UsageError(f"--host {redact_url(self.host)!r}: expected a URL like http://127.0.0.1:8000")
