"""Routes of the simulator: the OpenAI/vLLM API, /metrics, /tokenize, /reset_prefix_cache and the /sim/* test
endpoints."""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import logging
import random
import time
from typing import Any, cast
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry

from . import pooling, responses
from . import tokenizer as tok
from .adapters import adapter_entries, check_priority, parse_lora_modules
from .apiserver import ApiConn, ApiStage
from .config import SimConfig
from .engine import BatchingEngine, FixedEngine, MoeRouter
from .faults import HEADER, Fault, apply_quirks, draw_fault, global_rates, parse_fault
from .http import Connection, HttpRequest
from .metrics import SimStats, make_registry, render
from .replicas import REPLICA_HEADER, ReplicaSet
from .request import ApiError, build_plan, error_body, parse_request
from .stream import Stream
from .wire import VERSION

log = logging.getLogger("vllm_sim")
_NOT_FOUND = b'{"detail":"Not Found"}'
_NOT_ALLOWED = b'{"detail":"Method Not Allowed"}'


class SimServer:
    """Owns the listening socket, the engine and the statistics."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        tok.configure(cfg.chars_per_token)
        self.loop = asyncio.get_event_loop()
        self.stats = SimStats(cfg.model, cfg.num_experts, cfg.spec_tokens)
        self.view = self.stats  # what /metrics and /sim/stats show
        self.router = MoeRouter(cfg, self.stats)
        self.engine: FixedEngine | BatchingEngine | ReplicaSet
        self.replica_registries: list[CollectorRegistry] = []
        if cfg.replicas > 1:
            # --replicas N: N engines behind this port; the server's own counters plus theirs are shown (replicas.py)
            self.view = SimStats(cfg.model, cfg.num_experts, cfg.spec_tokens)
            self.engine = ReplicaSet(cfg, self.view, self.stats)
            self.replica_registries = [make_registry(st) for st in self.engine.replica_stats]
        else:
            self.engine = (
                FixedEngine(cfg, self.stats, self.router)
                if cfg.fixed
                else BatchingEngine(cfg, self.stats, self.router)
            )
        self.registry = make_registry(self.view)
        # --api-server-count: the API-server processes in front of each engine (apiserver.py); None: no such stage
        self.api = ApiStage(self.loop, cfg, cfg.replicas) if cfg.api_server_count > 0 else None
        self.rng = random.Random(cfg.seed)
        self.fault_rng = random.Random(cfg.seed + 1)
        self.rates = global_rates(cfg)
        self.server: asyncio.base_events.Server | None = None
        self.port = cfg.port
        self.created = int(time.time())
        self.conns: set[Connection] = set()
        self.adapters = parse_lora_modules(cfg.lora_modules)  # LoRA names served besides the model

    # -- lifecycle -------------------------------------------------------------------------
    def _factory(self) -> Connection:
        return Connection(self.handle, self.cfg.max_body_bytes, self.conns.add, self.conns.discard)

    async def listen(self) -> int:
        """Start listening; return the bound port."""
        self.server = await self.loop.create_server(
            self._factory,
            self.cfg.host,
            self.port,
            reuse_address=True,
            backlog=1024,
            reuse_port=self.cfg.reuse_port or None,
        )
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        """Stop listening and close every connection."""
        if self.server is not None:
            self.server.close()
        for c in list(self.conns):
            c.close()

    def _down_for(self, seconds: float) -> None:
        """Control: refuse new connections for a while (stop listening, then listen again)."""
        if self.server is not None:
            self.server.close()
            self.server = None
        for c in list(self.conns):  # like a restart: open connections (and their streams) are cut too
            c.close()

        async def relisten() -> None:
            await asyncio.sleep(seconds)
            for _ in range(50):  # the port may linger briefly; retry for up to ~5 s
                try:
                    await self.listen()
                    return
                except OSError:
                    await asyncio.sleep(0.1)
            log.error("could not listen again on port %s", self.port)

        self.loop.create_task(relisten())

    # -- dispatch --------------------------------------------------------------------------
    def _send(
        self,
        conn: Connection,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: list[tuple[str, str]] | None = None,
        vary: bool = True,
    ) -> None:
        """Respond and count it."""
        self.stats.served += 1
        self.stats.by_status[status] += 1
        conn.respond(status, body, content_type, headers, vary)

    def _json(self, conn: Connection, obj: Any, status: int = 200) -> None:
        self._send(conn, status, json.dumps(obj, separators=(",", ":")).encode())

    def handle(self, conn: Connection, req: HttpRequest) -> None:
        """Route one request."""
        path = req.path.rstrip("/") or "/"
        m = req.method
        if self.cfg.require_header:
            name, _, value = self.cfg.require_header.partition(":")
            given = req.headers.get(name.strip().lower(), "")
            if not hmac.compare_digest(given.encode(), value.strip().encode()):
                self._send(conn, 401, b'{"error":"Unauthorized"}', vary=False)
                return
        if self.cfg.api_key and path.startswith("/v1"):
            auth = req.headers.get("authorization", "")
            if not hmac.compare_digest(auth.encode(), f"Bearer {self.cfg.api_key}".encode()):
                self._send(conn, 401, b'{"error":"Unauthorized"}', vary=False)
                return
        if path in ("/v1/chat/completions", "/v1/completions"):
            if m != "POST":
                self._send(conn, 405, _NOT_ALLOWED)
                return
            self._generate(conn, req, path == "/v1/chat/completions")
            return
        if path in pooling.PATHS or path == "/v1/responses":  # pooling.py, responses.py
            if m != "POST":
                self._send(conn, 405, _NOT_ALLOWED)
            elif path == "/v1/responses":
                self._responses(conn, req)
            else:
                self._pooling(conn, req, pooling.PATHS[path])
            return
        if path == "/reset_prefix_cache":  # vLLM's dev-mode endpoint (VLLM_SERVER_DEV_MODE=1): always here
            self._reset_prefix_cache(conn, m)
            return
        if m == "GET":
            if path == "/health":
                self._send(conn, 200, b"", "")
            elif path in ("/v1/models", "/models"):
                self._json(conn, self._models())
            elif path == "/version":
                self._json(conn, {"version": VERSION})
            elif path in ("/metrics", "/sim/stats"):
                self._stats_page(conn, path, req.query)
            else:
                self._send(conn, 404, _NOT_FOUND)
            return
        if m == "POST" and path == "/tokenize" and self.cfg.tokenize_api != "none":
            self._tokenize(conn, req)
        elif m == "POST" and path == "/sim/control" and self.cfg.enable_control:
            self._control(conn, req)
        else:
            self._send(conn, 404, _NOT_FOUND)

    def _sync(self) -> None:
        """With --replicas, sum the replicas' statistics and the server's own into those shown."""
        if isinstance(self.engine, ReplicaSet):
            self.engine.sync()

    def _stats_page(self, conn: Connection, path: str, query: str) -> None:
        """/metrics or /sim/stats: the whole server's, or with ``?replica=N`` that replica's own (same names)."""
        asked = parse_qs(query).get("replica")
        registry, stats = self.registry, self.view
        if asked:
            n = self.cfg.replicas
            i = int(asked[0]) if asked[0].isdigit() else -1
            if not 0 <= i < n:
                detail = f"no replica {asked[0]!r}: this server has replicas 0..{n - 1}"
                self._send(conn, 404, json.dumps({"detail": detail}).encode())
                return
            if isinstance(self.engine, ReplicaSet):
                registry, stats = self.replica_registries[i], self.engine.replica_stats[i]
        self._sync()
        if path == "/metrics":
            self._send(conn, 200, render(registry), "text/plain; version=1.0.0; charset=utf-8")
        else:
            self._json(conn, stats.snapshot())

    def _models(self) -> dict[str, Any]:
        """The /v1/models listing, shaped like vLLM's."""
        mid = self.cfg.model
        return {
            "object": "list",
            "data": [
                {
                    "id": mid,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "vllm",
                    "root": mid,
                    "parent": None,
                    "max_model_len": self.cfg.max_model_len,
                    "permission": [
                        {
                            "id": "modelperm-sim",
                            "object": "model_permission",
                            "created": self.created,
                            "allow_create_engine": False,
                            "allow_sampling": True,
                            "allow_logprobs": True,
                            "allow_search_indices": False,
                            "allow_view": True,
                            "allow_fine_tuning": False,
                            "organization": "*",
                            "group": None,
                            "is_blocking": False,
                        }
                    ],
                },
                *adapter_entries(mid, self.adapters, self.created, self.cfg.max_model_len),
            ],
        }

    def _reset_prefix_cache(self, conn: Connection, method: str) -> None:
        """vLLM's POST /reset_prefix_cache: ``{"success": false}`` while running requests hold cached blocks."""
        if method != "POST":
            self._send(conn, 405, _NOT_ALLOWED)
            return
        bm = getattr(self.engine, "bm", None)  # the fixed engine caches nothing
        self._json(conn, {"success": bm.reset_prefix_cache() if bm is not None else True})

    def _tokenize(self, conn: Connection, req: HttpRequest) -> None:
        """vLLM's /tokenize: ``{"count", "max_model_len", "tokens"}``."""
        try:
            body = json.loads(req.body)
            if not isinstance(body, dict):
                raise ApiError(400, "Request body must be a JSON object")
            model = body.get("model") or self.cfg.model
            if model != self.cfg.model:
                raise ApiError(404, f"The model `{model}` does not exist.", "model")
            if self.cfg.tokenize_api == "llama.cpp":  # llama-server: {"content", "add_special"} -> {"tokens"}
                if not isinstance(body.get("content"), str):
                    raise ApiError(400, '"content" must be provided')
                self._json(conn, {"tokens": tok.encode_text(body["content"])})
                return
            if isinstance(body.get("messages"), list):
                msgs = [m for m in body["messages"] if isinstance(m, dict)]
                ids = tok.encode_chat(msgs)
            elif isinstance(body.get("prompt"), str):
                ids = tok.encode_text(body["prompt"])
            else:
                raise ApiError(400, "prompt or messages: field required")
        except ApiError as e:
            self._send(conn, e.status, e.body())
            return
        except (ValueError, UnicodeDecodeError) as e:
            self._send(conn, 400, error_body(400, f"Invalid JSON body: {e}"))
            return
        self._json(
            conn,
            {"count": len(ids), "max_model_len": self.cfg.max_model_len, "tokens": ids, "token_strs": None},
        )

    def _control(self, conn: Connection, req: HttpRequest) -> None:
        """POST /sim/control: ``{"down_for_s": S}`` and/or ``{"stall_for_s": S}``."""
        try:
            body = json.loads(req.body or b"{}")
            down = float(body.get("down_for_s", 0) or 0)
            stall = float(body.get("stall_for_s", 0) or 0)
        except (ValueError, TypeError, AttributeError) as e:
            self._send(conn, 400, error_body(400, f"bad control body: {e}"))
            return
        if stall > 0:
            self.engine.stall_all(stall)
            self.stats.faults["stall_all"] += 1
        if down > 0:
            self.stats.faults["down"] += 1
        self._json(conn, {"ok": True, "down_for_s": down, "stall_for_s": stall})
        if down > 0:
            self._down_for(down)

    def _pooling(self, conn: Connection, req: HttpRequest, api: str) -> None:
        """An embeddings, rerank or score answer after its delay (pooling.py; --fixed: exactly --ttft-ms)."""
        cfg = self.cfg
        try:
            body, lengths = pooling.answer(api, req.body, cfg.model, cfg.max_model_len, cfg.embed_dim)
        except ApiError as e:
            self._send(conn, e.status, e.body())
            return
        self.stats.prompt_tokens += sum(lengths)
        delay = cfg.ttft_ms / 1000.0 if cfg.fixed else pooling.pooling_delay_s(lengths, cfg)
        self.loop.call_later(delay, self._pooled, conn, body)

    def _pooled(self, conn: Connection, body: bytes) -> None:
        if not conn.closed:
            self.stats.success["stop"] += 1
            self._send(conn, 200, body)

    def _responses(self, conn: Connection, req: HttpRequest) -> None:
        """/v1/responses: its body as a chat request, generated by the same engine, written as Responses events."""
        try:
            raw = responses.as_chat_body(req.body)
        except ApiError as e:
            self._send(conn, e.status, e.body())
            return
        self._generate(conn, dataclasses.replace(req, body=raw), True, api="responses")

    # -- generation ------------------------------------------------------------------------
    def _generate(self, conn: Connection, req: HttpRequest, chat: bool, api: str = "") -> None:
        """Validate, apply request-level faults, and hand the stream to the engine."""
        cfg = self.cfg
        self.stats.generate_requests += 1
        fault: Fault | None = None
        hdr = req.headers.get(HEADER)
        if hdr:
            try:
                fault = parse_fault(hdr)
            except ValueError as e:
                self._send(conn, 400, error_body(400, f"bad {HEADER} header: {e}"))
                return
        elif self.rates:
            fault = draw_fault(cfg, self.rates, self.fault_rng)
        try:
            sreq = parse_request(req.body, chat, cfg.model, cfg.max_model_len, self.adapters)
            refused = check_priority(
                sreq.priority, cfg.scheduling_policy
            )  # vLLM's 400 without priority scheduling
            if refused:
                raise ApiError(400, refused, "priority")
        except ApiError as e:
            self._send(conn, e.status, e.body())
            return
        apply_quirks(cfg, sreq)  # --ignore-max-tokens, --constant-prompt-tokens
        sreq.api = api or sreq.api
        if fault is not None and fault.kind in ("500", "429"):
            self.stats.faults[fault.kind] += 1
            if fault.kind == "500":
                self._send(conn, 500, error_body(500, "Simulated internal server error"))
            else:
                self._send(
                    conn,
                    429,
                    error_body(429, "Simulated rate limit: retry later"),
                    headers=[("retry-after", "1")],
                )
            return
        plan = build_plan(sreq, self.rng, cfg.early_stop_prob, cfg.reasoning_tokens, cfg.reasoning_field)
        if fault is not None and fault.kind == "delay_headers":
            self.stats.faults["delay_headers"] += 1
            self.loop.call_later(fault.ms / 1000.0, self._begin, conn, sreq, plan, None, None)
            return
        self._begin(conn, sreq, plan, fault, req.received)

    def _begin(
        self, conn: Connection, sreq: Any, plan: Any, fault: Fault | None, arrival: float | None
    ) -> None:
        """Send headers (streams) and submit to the engine; arrival: the request's first byte (None: now)."""
        if conn.closed:
            return
        if arrival is None:
            arrival = self.loop.time()
        replica, stats = -1, self.stats
        if isinstance(self.engine, ReplicaSet):  # the router picks on arrival: the headers name the replica
            replica = self.engine.pick(sreq)
            stats = self.engine.replica_stats[replica]
        sink: Connection | ApiConn = conn
        if self.api is not None:
            proc = self.api.process_for(max(replica, 0))
            sink = ApiConn(conn, self.api, proc)
        s = Stream(
            cast(Connection, sink), sreq, plan, stats, fault, arrival, self.cfg.enable_prompt_tokens_details
        )
        if replica >= 0:
            s.replica = replica
            s.headers = [(REPLICA_HEADER, str(replica))]
        if self.api is not None:
            self.api.request(proc, sreq.prompt_tokens, self._enter, conn, s, True)
            return
        self._enter(conn, s)

    def _enter(self, conn: Connection, s: Stream, staged: bool = False) -> None:
        """The request past the API server (when there is one): its headers out, itself into the engine."""
        if staged:
            if conn.closed:
                return
            # the engine's clock starts here, as vLLM's arrival_time is set after the request is tokenized: its
            # queue and TTFT histograms leave out the time in the API server
            s.arrival = self.loop.time()
        sreq = s.req
        if sreq.stream:
            conn.start_stream(headers=s.headers)
        if self.cfg.fixed:
            self.stats.prompt_tokens += sreq.prompt_tokens
            self.stats.prefix_queries += sreq.prompt_tokens
        elif (
            self.cfg.request_overhead_ms > 0
        ):  # a twin's fixed cost per request (HTTP, tokenizing) before scheduling
            self.loop.call_later(self.cfg.request_overhead_ms / 1000.0, self.engine.submit, s)
            return
        self.engine.submit(s)
