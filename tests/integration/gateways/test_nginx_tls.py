"""HTTPS end to end: nginx as a TLS terminator (its own config, on a free port) in front of the simulator's fixed
mode; `vllm-locust run --host https://...` verifies the certificate against --ca-bundle, completes every request
and measures the simulator's ground truth through TLS; a wrong CA stops at the preflight in one line; --insecure
passes and says so."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.integration.core.helpers import cli
from tests.integration.gateways.nginx import NGINX, Gateway, start_nginx
from tests.unit.client.tls_certs import Certs, make_certs
from vllm_sim.launch import start_simulator
from vllm_users import exit_codes

pytestmark = pytest.mark.skipif(
    NGINX is None,
    reason="nginx is not installed (apt-get install -y nginx): the HTTPS gateway tests cannot run",
)

TTFT_MS, ITL_MS = 50.0, 10.0
LOAD = [
    "--users",
    "4",
    "--num-prompts",
    "24",
    "--input-len",
    "16",
    "--output-len",
    "12",
    "--ignore-eos",
    "--workers",
    "1",
    "--no-server-metrics",
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Certs]]:
    """The simulator (fixed TTFT 50 ms, ITL 10 ms) behind nginx on https://127.0.0.1:PORT (and an mTLS port)."""
    tmp = tmp_path_factory.mktemp("nginx")
    certs = make_certs(tmp / "certs")
    with start_simulator(["--fixed", "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS)]) as sim:
        with start_nginx(tmp, sim.port, certs.server_cert, certs.server_key, client_ca=certs.ca) as gw:
            yield gw, certs


@pytest.mark.exclusive  # it times the client against the simulator's ground truth: alone on the machine
@pytest.mark.timeout(120)
def test_https_run_verifies_the_ca_and_measures_the_ground_truth(gateway, tmp_path) -> None:
    gw, certs = gateway
    url = gw.https
    r = cli(["--host", url, "--ca-bundle", str(certs.ca), *LOAD], str(tmp_path), timeout=100)
    assert r.rc == 0, r.logs()[-3000:]
    res = r.result
    assert res["completed"] == 24 and res["failed"] == 0
    assert res["total_output_tokens"] == 24 * 12
    assert "Traceback" not in r.logs()
    assert res["meta"]["tls"] == {"insecure": False, "ca_bundle": str(certs.ca), "client_cert": None}
    assert f"verified against {certs.ca}" in r.out
    # through the TLS terminator, the simulator's fixed ground truth. Stamps taken after the stream, or of bytes
    # not yet decrypted, are off by tens of milliseconds (TTFT near E2EL = 160 ms, ITL 0); a loaded machine delays
    # the simulator and nginx by a few (benchmarks/bench_tls.py measures TLS against plain HTTP, interleaved)
    assert abs(res["median_ttft_ms"] - TTFT_MS) < 10.0, res["median_ttft_ms"]
    assert abs(res["median_itl_ms"] - ITL_MS) < 2.0, res["median_itl_ms"]


@pytest.mark.timeout(60)
def test_wrong_ca_stops_at_the_preflight_in_one_line(gateway, tmp_path) -> None:
    gw, certs = gateway
    url = gw.https
    r = cli(["--host", url, "--ca-bundle", str(certs.wrong_ca), *LOAD], str(tmp_path), timeout=50)
    assert r.rc == exit_codes.PREFLIGHT, r.logs()[-3000:]
    lines = [x for x in r.err.splitlines() if x.strip()]
    port = url.rsplit(":", 1)[1]
    assert (
        len(lines) == 1 and f"TLS: the certificate of 127.0.0.1:{port} failed verification: " in lines[0]
    ), r.err
    assert not os.path.exists(os.path.join(r.run_dir, "result.json"))  # nothing was sent


@pytest.mark.timeout(120)
def test_insecure_passes_and_is_said(gateway, tmp_path) -> None:
    gw, certs = gateway
    url = gw.https
    # the reactor's other path too: no kernel stamps (the clock right after each decrypted read)
    r = cli(
        ["--host", url, "--insecure", *LOAD],
        str(tmp_path),
        timeout=100,
        env={"SSL_CERT_FILE": str(certs.wrong_ca), "VLLM_LOCUST_KERNEL_TIMESTAMPS": "0"},
    )
    assert r.rc == 0, r.logs()[-3000:]
    assert r.result["completed"] == 24 and r.result["failed"] == 0
    assert r.result["meta"]["tls"]["insecure"] is True
    assert r.out.count("--insecure") == 1 and "NOT verified" in r.out


@pytest.mark.timeout(120)
def test_client_certificate_for_mtls(gateway, tmp_path) -> None:
    gw, certs = gateway
    tls_args = [
        "--ca-bundle",
        str(certs.ca),
        "--client-cert",
        str(certs.client_cert),
        "--client-key",
        str(certs.client_key),
    ]
    r = cli(["--host", gw.mtls, *tls_args, *LOAD], str(tmp_path), timeout=100)
    assert r.rc == 0, r.logs()[-3000:]  # the preflight's connections and every load user's present it
    assert r.result["completed"] == 24 and r.result["failed"] == 0
    assert r.result["meta"]["tls"]["client_cert"] == str(certs.client_cert)
    without = cli(
        ["--host", gw.mtls, "--ca-bundle", str(certs.ca), *LOAD], str(tmp_path), timeout=50, name="no"
    )
    assert without.rc == exit_codes.PREFLIGHT  # nginx answers 400 without a certificate: nothing is sent
