"""The moe preset's expert balance from real vLLM: `routed_experts` (.npy, base64) decoded without numpy, counted
per layer and expert, its balance and the balancedness EPLB would log; EPLB's log lines; the GPU driver's rows."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks import moe_routing

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import bench_gpu_moe as bench  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)  # what vLLM's serving code does
    return buf.getvalue()


@pytest.mark.parametrize("dtype", ["uint8", "<u2", ">u2", "int32", "int64"])
def test_decode_npy_matches_numpy(dtype: str) -> None:
    a = np.arange(2 * 3 * 2, dtype=dtype).reshape(2, 3, 2)
    shape, flat = moe_routing.decode_npy(_npy(a))
    assert shape == (2, 3, 2) and flat == a.ravel().tolist()


def test_decode_npy_refuses_what_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="not a .npy"):
        moe_routing.decode_npy(b"PK\x03\x04 zip")
    with pytest.raises(ValueError, match="'<f4'"):
        moe_routing.decode_npy(_npy(np.zeros((2, 2), dtype="float32")))
    with pytest.raises(ValueError, match="expected ints"):
        moe_routing.decode_npy(_npy(np.asfortranarray(np.arange(6, dtype="uint8").reshape(2, 3))))
    with pytest.raises(ValueError, match="values for shape"):
        moe_routing.decode_npy(_npy(np.arange(6, dtype="uint8").reshape(2, 3))[:-1])


class _Handler(BaseHTTPRequestHandler):
    routing: list[np.ndarray | None] = []
    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append(body)
        r = self.routing[(len(self.bodies) - 1) % len(self.routing)]
        choice = {"text": "x", "routed_experts": None if r is None else base64.b64encode(_npy(r)).decode()}
        data = json.dumps({"choices": [choice]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def _server(routing: list[np.ndarray | None]) -> Iterator[str]:
    _Handler.routing, _Handler.bodies = routing, []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_routed_expert_counts_per_layer_and_expert() -> None:
    # two requests: (tokens, layers=2, topk=2) expert ids, as vLLM returns them
    r1 = np.array([[[0, 1], [2, 3]], [[0, 2], [2, 3]]], dtype="uint8")
    r2 = np.array([[[1, 0], [3, 2]]], dtype="uint8")
    with _server([r1, r2]) as url:
        got = moe_routing.routed_expert_counts(url, "moe", experts=4, requests=2, max_tokens=8)
        sent = list(_Handler.bodies)
    assert got is not None
    assert got["per_layer"] == [[3, 2, 1, 0], [0, 0, 3, 3]]
    assert got["token_positions"] == 3 and got["layers"] == 2 and got["topk"] == 2 and got["requests"] == 2
    assert all(b["stream"] is False and b["max_tokens"] == 8 and b["model"] == "moe" for b in sent)
    assert sent[0]["prompt"] != sent[1]["prompt"]  # fresh random words per request


def test_routed_expert_counts_absent_without_routing() -> None:
    with _server([None]) as url:
        assert moe_routing.routed_expert_counts(url, "moe", experts=8, requests=3) is None
        assert len(_Handler.bodies) == 1  # it stops at the first answer without routing


def test_routed_expert_counts_refuses_an_expert_outside_the_model() -> None:
    with (
        _server([np.array([[[0, 9]]], dtype="uint8")]) as url,
        pytest.raises(ValueError, match="expert id 9"),
    ):
        moe_routing.routed_expert_counts(url, "moe", experts=8, requests=1)


def test_routing_balance_by_hand() -> None:
    b = moe_routing.routing_balance([[4, 0, 2, 2], [1, 1, 1, 1]])
    # totals 5, 1, 3, 3: mean 3
    assert b["experts"] == 4 and b["tokens"] == 12 and b["max_over_mean"] == pytest.approx(5 / 3)
    assert b["cv"] == pytest.approx(np.std([5, 1, 3, 3]) / 3)
    assert b["layer_max_over_mean"] == pytest.approx((4 / 2 + 1 / 1) / 2)
    # EPLB: sum over layers of mean rank load / sum of max rank load; experts in order over N ranks
    spread = b["eplb_balancedness_if_spread"]
    assert spread["2"] == pytest.approx((4 + 2) / (4 + 2))  # ranks (4, 4) and (2, 2)
    assert spread["4"] == pytest.approx((2 + 1) / (4 + 1))
    assert "8" not in spread  # more GPUs than experts


def test_routing_balance_uneven_halves() -> None:
    spread = moe_routing.routing_balance([[6, 2, 1, 1]], ranks=(2,))["eplb_balancedness_if_spread"]
    assert spread["2"] == pytest.approx(5 / 8)  # ranks 8 and 2: mean 5, max 8


def test_eplb_log_lines() -> None:
    text = (
        "INFO 12-01 10:00:00 [eplb_state.py:598] EPLB step: 12 for model Mixtral: avg_tokens=1024.50, "
        "max_tokens=1500, balancedness=0.6830, steps until the next rearrangement: 2988\nother line\n"
    )
    assert moe_routing.eplb_log_lines(text) == [
        {"step": 12, "model": "Mixtral", "avg_tokens": 1024.5, "max_tokens": 1500, "balancedness": 0.683}
    ]
    assert moe_routing.eplb_log_lines("no eplb here") == []


def test_driver_rows_per_gpu_and_absent_balance() -> None:
    doc = {
        "steps": [
            {"concurrency": 1, "output_throughput": 100.0, "scaling_efficiency": 1.0, "completed": 20},
            {
                "concurrency": 4,
                "output_throughput": 360.0,
                "scaling_efficiency": 0.9,
                "expert_load": {"max_over_mean": 1.5, "cv": 0.2},
            },
        ]
    }
    rows = bench.sweep_rows(doc, gpus=2)
    assert [r["out_tok_s_per_gpu"] for r in rows] == [50.0, 180.0]
    assert rows[0]["experts_max_over_mean"] is None and rows[1]["experts_max_over_mean"] == 1.5
    assert bench.sweep_rows(None, 1) == []


def test_driver_reports_vllms_eplb_refusal() -> None:
    msg = "ValueError: EPLB requires tensor, prefill-context, or data parallelism, but got TP=1, PCP=1, DP=1."
    p = subprocess.Popen(
        [sys.executable, "-c", f"import sys; print('noise'); sys.exit({msg!r})"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    e = bench.eplb_answer(p)
    assert e["checked"] and e["accepted"] is False and e["vllm_says"] == msg
    assert e["note"] == moe_routing.EPLB_ONE_GPU
    ok = subprocess.Popen(
        [sys.executable, "-c", "print('EPLB accepted on one GPU')"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert bench.eplb_answer(ok)["accepted"] is True and bench.eplb_answer(None)["checked"] is False
