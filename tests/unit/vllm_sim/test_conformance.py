"""Conformance with real vLLM 0.32: the simulator's wire structure against golden transcripts.

Each golden request is replayed against the simulator (model name swapped); we compare the sequence
of chunk kinds, every chunk's field names in order (and which fields are null), response headers and
error bodies. A test skips while its golden file is absent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vllm_sim import probe
from vllm_sim.launch import SimProcess, start_simulator

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "golden"
GOLDEN_MODEL = "tiny-llama"
pytestmark = pytest.mark.timeout(60)


def golden(name: str) -> Path:
    """Path of a golden file; skip the test when it has not been recorded."""
    p = GOLDEN / name
    if not p.exists():
        pytest.skip(f"golden file {name} not recorded yet")
    return p


VSIM_ARGS = ["--fixed", "--ttft-ms", "2", "--itl-ms", "1", "--max-model-len", "2048"]


@pytest.fixture(scope="module")
def vsim() -> Iterator[SimProcess]:
    """A simulator with vLLM's defaults (prompt token details off) and the golden max_model_len."""
    with start_simulator(VSIM_ARGS) as p:
        yield p


@pytest.fixture(scope="module")
def keyed_sim() -> Iterator[SimProcess]:
    """The same, with an API key (for the 401 transcripts)."""
    with start_simulator([*VSIM_ARGS, "--api-key", "golden-key"]) as p:
        yield p


def shape(v: Any) -> Any:
    """Structure of a JSON value: keys in order, list element shapes, scalars by type (null kept)."""
    if isinstance(v, dict):
        return [(k, shape(x)) for k, x in v.items()]
    if isinstance(v, list):
        return ["list", shape(v[0])] if v else "[]"
    if v is None:
        return "null"
    return "number" if isinstance(v, (int, float)) and not isinstance(v, bool) else type(v).__name__


def kind(ev: Any) -> str:
    """Chunk kind: role, content, tool_header, tool_args, finish, usage, done."""
    if ev == "[DONE]":
        return "done"
    if not ev["choices"]:
        return "usage"
    ch = ev["choices"][0]
    if ch.get("finish_reason") is not None:
        return "finish"
    d = ch.get("delta", {})
    if "role" in d:
        return "role"
    if d.get("tool_calls"):
        return "tool_header" if "id" in d["tool_calls"][0] else "tool_args"
    return "content"


def read_sse(path: Path) -> list[Any]:
    """Parse a golden .sse file into data payloads."""
    out = []
    for block in path.read_text().split("\n\n"):
        block = block.strip()
        if block.startswith("data: "):
            payload = block[6:]
            out.append("[DONE]" if payload == "[DONE]" else json.loads(payload))
    return out


def request_of(name: str) -> dict[str, Any]:
    """The recorded request (and response metadata) of a golden transcript."""
    meta = json.loads(golden(f"{name}.headers.json").read_text())
    return meta


def replay(sim: SimProcess, req: dict[str, Any], **extra: Any) -> probe.ProbeResult:
    """Send the golden request to the simulator with our model name."""
    body = dict(req["body"]) if isinstance(req.get("body"), dict) else None
    if body is not None and body.get("model") == GOLDEN_MODEL:
        body["model"] = "sim-model"
    if body is not None:
        body.update(extra)
    raw = req.get("raw_body")
    payload: Any = (
        raw.replace(GOLDEN_MODEL, "sim-model").encode() if raw is not None and body is None else body
    )
    headers = {"Connection": "close"}
    auth = req.get("headers", {}).get("Authorization")
    if auth:
        headers["Authorization"] = auth
    return probe.request(sim.url, req["path"], payload, method=req["method"], headers=headers)


def collapse(kinds: list[str]) -> list[str]:
    """Run-length collapse of chunk kinds (token counts differ between models)."""
    out: list[str] = []
    for k in kinds:
        if not out or out[-1] != k:
            out.append(k)
    return out


def by_kind(events: list[Any]) -> dict[str, Any]:
    """First chunk shape of each kind."""
    out: dict[str, Any] = {}
    for ev in events:
        out.setdefault(kind(ev), shape(ev))
    return out


def header_names(headers: list[list[str]] | dict[str, str]) -> list[str]:
    """Response header names in order, lower-case."""
    items = headers.items() if isinstance(headers, dict) else headers
    return [k.lower() for k, _ in items]


STREAMS = [
    "chat_stream",
    "chat_stream_no_usage",
    "chat_stream_continuous_usage",
    "chat_stream_ignore_eos",
    "completions_stream",
    "completions_stream_no_usage",
    "chat_json_schema_stream",
    "chat_tools_stream",
    "chat_stream_cached",
]


@pytest.mark.parametrize("name", STREAMS)
def test_stream_structure_matches_golden(vsim: SimProcess, name: str) -> None:
    gold = read_sse(golden(f"{name}.sse"))
    meta = request_of(name)
    # the golden model ran to max_tokens; make our run do the same so the chunk sequence is comparable
    r = replay(vsim, meta["request"], ignore_eos=True)
    assert r.status == meta["status"] and r.complete
    ours = r.data()
    assert collapse([kind(e) for e in ours]) == collapse([kind(e) for e in gold])
    gk, ok = by_kind(gold), by_kind(ours)
    for k in gk:
        assert ok[k] == gk[k], f"{name}: {k} chunk differs\n ours: {ok[k]}\n vllm: {gk[k]}"
    assert header_names(r.headers) == [h for h in header_names(meta["headers"])]
    # one SSE event per HTTP chunk, as uvicorn sends them
    if meta.get("sse_event_count"):
        assert len(ours) == len([e for e in ours])


@pytest.mark.parametrize("name", ["chat_nonstream", "completions_nonstream"])
def test_nonstream_structure_matches_golden(vsim: SimProcess, name: str) -> None:
    gold = json.loads(golden(f"{name}.json").read_text())
    meta = request_of(name)
    r = replay(vsim, meta["request"], ignore_eos=True)
    assert r.status == 200
    assert shape(r.json()) == shape(gold)
    assert header_names(r.headers) == header_names(meta["headers"])


@pytest.mark.parametrize("name", ["models", "version", "tokenize", "tokenize_chat"])
def test_simple_endpoints_match_golden(vsim: SimProcess, name: str) -> None:
    gold = json.loads(golden(f"{name}.json").read_text())
    meta = request_of(name)
    r = replay(vsim, meta["request"])
    assert r.status == meta["status"]
    assert shape(r.json()) == shape(gold)


def _errors() -> list[str]:
    return sorted(p.stem for p in GOLDEN.glob("errors_*.json")) or ["errors_bad_json"]


@pytest.mark.parametrize("name", _errors())
def test_errors_match_golden(request: pytest.FixtureRequest, name: str) -> None:
    gold = json.loads(golden(f"{name}.json").read_text())
    sim = request.getfixturevalue("keyed_sim" if name.startswith("errors_401") else "vsim")
    r = replay(sim, gold["request"])
    assert r.status == gold["status"], r.body
    ours = r.json()
    assert shape(ours) == shape(gold["body"])
    if "error" in ours and isinstance(ours["error"], dict):
        want = gold["body"]["error"]
        assert ours["error"]["type"] == want["type"]
        assert ours["error"]["param"] == want["param"]
        # messages differ only by the model name and figures a real tokenizer counts differently
        norm = lambda m: re.sub(r"\d+", "N", m.replace(GOLDEN_MODEL, "sim-model"))  # noqa: E731
        assert norm(ours["error"]["message"]) == norm(want["message"])
    assert header_names(r.headers) == header_names(gold["headers"])


def test_metrics_names_and_labels_exist_in_vllm(vsim: SimProcess) -> None:
    gold = golden("metrics.txt").read_text()
    probe.request(vsim.url, "/v1/completions", {"prompt": "a b", "max_tokens": 2})
    ours = probe.request(vsim.url, "/metrics").body.decode()
    sample = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s", re.M)
    gold_labels = {m.group(1): set(re.findall(r'(\w+)="', m.group(2) or "")) for m in sample.finditer(gold)}
    checked = 0
    for m in sample.finditer(ours):
        name = m.group(1)
        if not name.startswith("vllm:") or name.startswith("vllm:moe_"):
            continue  # sim:* and the MoE counters are our extensions
        assert name in gold_labels, f"{name} is not a vLLM 0.32 metric"
        assert set(re.findall(r'(\w+)="', m.group(2) or "")) == gold_labels[name], name
        checked += 1
    assert checked > 20
