"""The server option group: where the load goes, which model, the API key and TLS."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_users import option_types as T
from vllm_users.client.endpoints import POLICIES, host_urls
from vllm_users.option_spec import BOTH, CALIBRATE, RUN, opt


@dataclass(frozen=True)
class ServerOptions:
    """The server: its URL, model, API key and TLS (https:// hosts: the load, the preflight, /metrics,
    calibration; docs/https.md)."""

    host: str = opt(
        "",
        T.text,
        "Server base URL, e.g. http://127.0.0.1:8000 (none: start the simulator); several replicas: "
        "URL1,URL2,... or @FILE (one URL a line; docs/fleets.md)",
        RUN,
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

    endpoint_policy: str = opt(
        "round-robin",
        T.text,
        "Several --host URLs: which one each request goes to (a session's later turns always follow its "
        "first; `session`: each session placed by a hash of its key)",
        *BOTH,
        choices=POLICIES,
    )
    replica_header: str = opt(
        "",
        T.header_name,
        "Response header naming the replica that served a request (e.g. x-served-by): results per replica",
        *BOTH,
        metavar="NAME",
    )

    def check(self) -> None:
        """--host, when given, is one http(s) URL or several (UsageError naming the bad one without its
        credentials)."""
        host_urls(self.host)
