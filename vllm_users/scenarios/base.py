"""LLMUser: a Locust FastHttpUser that streams OpenAI requests and turns each into one RequestRecord.

Scenario classes override `build_request` (what to send) and optionally `check` (validate the answer)
and `after` (e.g. keep a conversation going). A user whose ticket is a session of several requests (tool
follow-ups, agent loops) overrides `flow` and calls `send` once per request: each request is its own record,
linked to the others by `session` (the index of the ticket that started it) and `turn` (0, 1, ...).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import gevent
import gevent.lock
import gevent.pool
from locust import constant, task
from locust.contrib.fasthttp import FastHttpUser

from vllm_users.client import tls
from vllm_users.client.endpoints import Chooser, endpoint_label, host_urls, primary_host
from vllm_users.client.ghc_adapter import client_for, connection_pool, set_read_timeout
from vllm_users.client.responses import path_of
from vllm_users.client.stream import Limits, StreamResult, send_and_read
from vllm_users.distributed import env_state, plugin  # noqa: F401  (plugin: importing it registers the listeners)
from vllm_users.measure.record import RequestRecord, add_images, interrupted_record, record_from_stream
from vllm_users.model_mix import parse_mix
from vllm_users.options import env_api_key
from vllm_users.redact import Redactor, connection_headers, redact_url, secret_values
from vllm_users.scenarios import registry
from vllm_users.scenarios.backoff import Backoff
from vllm_users.scenarios.request_spec import Reply, RequestFailure, RequestSpec
from vllm_users.workload.calibration import Budget, calibrate_lengths
from vllm_users.workload.classes import plan_from
from vllm_users.workload.images import encode_body, image_set, request_images
from vllm_users.workload.prompts import LengthModel, RandomPrompts
from vllm_users.workload.ticket import Ticket

CHAT_TEMPLATED = ("chat", "responses")  # endpoints whose prompt goes through the chat template
REQUEST_TYPE = "STREAM"  # Locust's "Type" column: one row per scenario, response time = E2EL
log = logging.getLogger("vllm_locust")


@dataclass(slots=True)
class _Endpoint:
    """One of several --host URLs as a user sends to it: its label, pooled client and headers."""

    label: str
    http: Any
    headers: dict[str, str]


@dataclass(slots=True)
class _Link:
    """Where a request belongs: its scenario, its session and turn, and (first request only) its intended time."""

    scenario: str
    t_intended: float | None
    session: int
    turn: int


_shared: dict[Any, Any] = {}  # per process: resolved model and length calibration (by the table handed in)
CALIBRATION_CONCURRENCY = 8  # below FastHttpUser's 10 connections per client
_shared_lock = gevent.lock.BoundedSemaphore()  # hundreds of users start at once: ask the server once


def _base_model(text: str) -> str:
    """--model's one name, or a mix's base; "" when none is given."""
    mix = parse_mix(text)
    return mix.base if mix is not None else ""


class LLMUser(FastHttpUser):
    """Base class of every scenario user (abstract)."""

    abstract = True
    scenario = "base"
    min_images = 0  # images: image parts per chat request at least (the vision scenario: 1)
    # a built-in scenario's record (scenarios/registry.py) sets these on its class; None: any endpoint, unchecked
    endpoints: tuple[str, ...] | None = None
    one_request_per_ticket = False  # each ticket is exactly one request
    shape: str | None = None  # `package.module:Class` of the LoadTestShape the scenario brings
    wait_time = constant(0)
    network_timeout = 120.0
    connection_timeout = 10.0
    insecure = (
        False  # https: verify the server's certificate (--insecure skips it; __init__ sets both per run)
    )
    _endpoints: list[_Endpoint] = []  # several --host URLs (on_start); empty: one server, `_http`

    def __init__(self, environment: Any) -> None:
        """A FastHttpUser whose TLS context is the run's (--ca-bundle, --insecure, --client-cert: client/tls.py)."""
        cfg = tls.TLSConfig.of(env_state.options(environment).server)
        self.insecure = cfg.insecure
        self.ssl_context_factory = tls.user_context_factory(cfg)
        super().__init__(environment)
        self._backoff = Backoff()  # closed loop: a pause after each refused or reset connection, capped

    def __init_subclass__(cls, **kw: Any) -> None:
        """A concrete user that names no `scenario` is recorded under its class name; the class a built-in
        scenario's record names takes the record's endpoints, one-request-per-ticket flag and shape."""
        super().__init_subclass__(**kw)
        declared = registry.scenario(cls.__dict__.get("scenario", ""))
        if declared is not None and declared.user == f"{cls.__module__}:{cls.__qualname__}":
            cls.endpoints = declared.endpoints
            cls.one_request_per_ticket = declared.one_request_per_ticket
            cls.shape = declared.shape
        if (
            not cls.__dict__.get("abstract", False)
            and "scenario" not in cls.__dict__
            and cls.scenario == "base"
        ):
            cls.scenario = cls.__name__

    def on_start(self) -> None:
        """Resolve the HTTP client, auth headers, model and prompt lengths once."""
        o = self.options = env_state.options(self.environment)
        # a plain `locust --host http://user:pass@...`: the userinfo becomes Basic auth (vllm-locust run strips it)
        # several URLs: the first is the model lookup's; `_fleet` makes each endpoint's client
        host, auth = connection_headers(
            primary_host(self.host or ""), dict(o.handoff.extra_headers), env_api_key()
        )
        self._http = client_for(self.client.client, host)
        set_read_timeout(self._http, o.measure.stream_timeout)
        self._limits = Limits(o.measure.request_timeout, o.measure.stall_timeout)
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",
            **auth,  # --header's, then the API key's Bearer unless --header names an Authorization
        }
        # a server may echo a request's credentials in its error answer: a record's error never holds them
        urls = [self.host or ""] if "," not in (self.host or "") else (self.host or "").split(",")
        self._redactor = Redactor(secret_values(auth, env_api_key(), urls))
        with _shared_lock:
            self.model = _base_model(o.server.model) or _shared.get("model") or self._resolve_model()
            _shared["model"] = self.model
            pk = (
                "plan",
                o.classes.vllm_classes,
                o.server.model,
                o.request.seed,
            )  # the class / model-mix draw, once per process
            self._plan = _shared.get(pk) or _shared.setdefault(
                pk, plan_from(o.classes.vllm_classes, o.server.model, o.request.seed)
            )
        self.user_id = id(self) & 0xFFFFFF
        self._endpoints = self._fleet(o)
        self._preconnect()
        if o.images.images or self.min_images:  # images: the pool is encoded now, off the hot path
            image_set(o.images, o.request.seed)
        self.setup_scenario()

    def _fleet(self, o: Any) -> list[_Endpoint]:
        """Several --host URLs: one pooled client per endpoint (its own keep-alive connections) and the process's
        chooser; [] for one URL, whose requests go through `self._http` as always."""
        urls = host_urls(self.host or "")
        if len(urls) < 2:
            return []
        out = []
        for u in urls:
            clean, auth = connection_headers(u, dict(o.handoff.extra_headers), env_api_key())
            http = client_for(self.client.client, clean)
            set_read_timeout(http, o.measure.stream_timeout)
            out.append(_Endpoint(endpoint_label(clean), http, {**self.headers, **auth}))
        self._http = out[0].http  # the model lookup and a worker's calibration: the first endpoint
        with _shared_lock:  # one chooser per process: round-robin and in-flight counts over all its users
            key = ("chooser", tuple(urls), o.server.endpoint_policy, o.request.seed)
            self._chooser: Chooser = _shared.get(key) or _shared.setdefault(
                key, Chooser(len(urls), o.server.endpoint_policy, o.request.seed)
            )
        return out

    def _preconnect(self) -> None:
        """Open this user's keep-alive connection now (one per endpoint), so no request's TTFT holds a TCP
        handshake and a name lookup (gevent resolves through a thread pool: 64 users starting together queue there)."""
        for http in [e.http for e in self._endpoints] or [self._http]:
            pool = connection_pool(http)
            try:
                sock = pool.get_socket()
            except Exception:  # noqa: BLE001 - an unreachable server shows up as the first request's failure
                continue
            pool.return_socket(sock)

    def setup_scenario(self) -> None:
        """Scenario hook: prepare prompt sources (runs once per user)."""

    def _get_json(self, path: str) -> Any:
        resp = self._http.get(path, headers={k: v for k, v in self.headers.items() if k != "Accept"})
        raw = resp.read()
        if resp.status_code != 200:
            raise RuntimeError(f"GET {path} -> HTTP {resp.status_code}")
        return json.loads(raw)

    def _resolve_model(self) -> str:
        try:
            models: list[str] = [str(m["id"]) for m in self._get_json("/v1/models")["data"]]
        except Exception as e:  # noqa: BLE001 - any failure here means "cannot pick a model"
            raise RuntimeError(
                f"cannot list models at {redact_url(self.host or '')}/v1/models: {e}"
            ) from None
        if len(models) != 1:
            raise RuntimeError(f"server has {len(models)} models {models}; pass --model")
        return models[0]

    def length_model(self) -> LengthModel:
        """How prompt words map to this server's tokens (calibrated once per process)."""
        with _shared_lock:
            return self._length_model()

    def _length_model(self) -> LengthModel:
        """The run's calibration: handed in (`vllm_lengths`: `vllm-locust run`'s preflight, or a plain master's),
        else calibrated here once per process, bounded, before this user sends anything (--run-time counts from
        the first load request, so this time is not the measured window's)."""
        table = self.options.handoff.vllm_lengths
        key = ("lengths", table)
        lm = _shared.get(key)
        if lm is None and table:
            try:
                lm = LengthModel.from_table(json.loads(table))
            except ValueError as e:  # our own JSON: only a hand-set --vllm-lengths gets here
                log.warning("vllm-locust: --vllm-lengths ignored (%s); calibrating here", e)
        if lm is None:
            lm = self._calibrate_here()
        _shared[key] = lm
        ctx = env_state.context(self.environment)
        if (
            ctx.calibration is None
        ):  # this test's context tells the master (each test of the web UI has its own)
            ctx.calibration = lm.summary()
        return lm

    def _calibrate_here(self) -> LengthModel:
        budget = Budget(concurrency=CALIBRATION_CONCURRENCY)

        def post(path: str, body: dict[str, Any]) -> tuple[int, bytes] | None:
            timer = gevent.Timeout(budget.timeout())  # a probe past its time is cut off
            timer.start()
            try:
                resp = self._http.request("POST", path, body=json.dumps(body), headers=self.headers)
                return resp.status_code, resp.read()
            except gevent.Timeout as t:
                if t is not timer:
                    raise
                return None
            except Exception:  # noqa: BLE001 - no such endpoint: the next source is tried
                return None
            finally:
                timer.close()

        # the word counts overlap on the client's pooled connections: a remote server's round trips add up
        pool = gevent.pool.Pool(CALIBRATION_CONCURRENCY)
        lm = calibrate_lengths(
            post, self.model, self.options.scenario.endpoint in CHAT_TEMPLATED, pool.imap, budget
        )
        lm.probes["where"] = "worker"
        return lm

    def random_prompts(self) -> RandomPrompts:
        """vLLM-bench-style random prompts from the run's options."""
        o = self.options
        chat = o.scenario.endpoint == "chat"
        return RandomPrompts(
            o.request.input_len,
            o.request.output_len,
            o.request.range_ratio,
            o.request.seed,
            chat,
            self.length_model(),
        )

    # ----- the task -----
    @task
    def one_request(self) -> None:
        """Take the next ticket (budget or schedule), send, record."""
        ctx = env_state.context(self.environment)
        ticket = ctx.next_ticket()
        if ticket is None:
            gevent.sleep(0.5)  # share used up or stopping: idle until the run ends
            return
        ctx.open_sessions += 1  # the worker is not done while a session is between two of its requests
        try:
            self.flow(ticket)
        finally:
            ctx.open_sessions -= 1

    def flow(self, ticket: Ticket) -> None:
        """Scenario hook: what one ticket does. By default one request: build_request, send, after."""
        spec = self.build_request(ticket)
        reply = self.send(spec, ticket)
        self.after(spec, reply.result, reply.record)

    def think(self, seconds: float) -> bool:
        """Think time between a session's requests; False when the run is stopping (end the session then)."""
        ctx = env_state.context(self.environment)
        deadline = perf_counter() + seconds
        while not ctx.stopping:
            left = deadline - perf_counter()
            if left <= 0:
                return True
            gevent.sleep(min(left, 0.25))
        return False

    def stopping(self) -> bool:
        """True once the run is stopping (a session then starts no more requests)."""
        env = getattr(self, "environment", None)
        return env is not None and env_state.context(env).stopping

    def build_request(self, ticket: Ticket) -> RequestSpec:
        """Scenario hook: the request for this ticket."""
        raise NotImplementedError

    def check(self, spec: RequestSpec, res: StreamResult, rec: RequestRecord) -> None:
        """Scenario hook: validate a successful answer (may set rec.error / rec.valid)."""

    def after(self, spec: RequestSpec, res: StreamResult, rec: RequestRecord) -> None:
        """Scenario hook: after the record is kept (e.g. extend a conversation)."""

    def sampling_params(self, output_len: int) -> dict[str, Any]:
        """Common body fields: model, max_tokens, streaming with usage."""
        o = self.options
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": output_len,
            "temperature": o.request.temperature,
        }
        if not o.request.no_stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if o.request.ignore_eos:
            body["ignore_eos"] = True
        # the sampling seed is the user's, never --seed: a repeat changes its prompts (--seed + k), and its bodies
        # must stay alike, or each repeat would sample differently (a seeded server samples per request)
        if o.request.sampling_seed >= 0:
            body["seed"] = o.request.sampling_seed
        return body

    def send(self, spec: RequestSpec, ticket: Ticket, scenario: str | None = None) -> Reply:
        """Send one request of `ticket`'s session, keep its record (under `scenario`, default the user's),
        fire Locust's event; the scenario's `check` runs on a successful answer first."""
        ctx = env_state.context(self.environment)
        link = _Link(
            scenario or self.scenario,
            ticket.t_intended if ticket.sent == 0 else None,
            ticket.index if spec.session is None else spec.session,
            ticket.sent if spec.turn is None else spec.turn,
        )
        ticket.sent += 1
        if self._plan.active:  # traffic classes / model mix: class, model and priority by the session
            spec.request_class = self._plan.apply(spec.body, link.session, link.scenario, spec.request_class)
        api = spec.endpoint or ("chat" if spec.chat else "completions")
        n_images = 0  # images: --images N (or the request's own count) on any chat request
        if api == "chat":
            n_images = request_images(
                spec.body,
                self.options.images,
                self.options.request.seed,
                link.session,
                link.turn,
                self.min_images,
                spec.context.get("images"),
            )
        path = path_of(api)
        body = encode_body(spec.body)  # json.dumps, image data spliced in (not re-scanned: base64 is large)
        http, headers, where = self._http, self.headers, None
        if self._endpoints:  # several servers: the policy's choice; a session stays where it began
            sticky = spec.affinity if spec.affinity and self._chooser.policy == "session" else None
            i = self._chooser.choose(sticky or str(link.session))
            where = self._endpoints[i]
            http, headers = where.http, where.headers
            self._chooser.inflight[i] += 1
        me = gevent.getcurrent()
        ctx.first_request()  # --run-time counts from the run's first one
        ctx.inflight.add(me)
        try:
            res = send_and_read(
                http,
                path,
                body,
                headers,
                stream=bool(spec.body.get("stream")),
                want_text=spec.want_text,
                api=api,
                replica_header=self.options.server.replica_header,
                limits=self._limits,
            )
        except gevent.GreenletExit:
            ctx.submit(
                interrupted_record(
                    scenario=link.scenario,
                    worker=ctx.name,
                    user=self.user_id,
                    seq=ctx.next_seq(),
                    endpoint=api,
                    t_intended=link.t_intended,
                    input_len=spec.input_len,
                    output_len=spec.output_len,
                    turn=link.turn,
                    session=link.session,
                    host=where.label if where is not None else None,
                )
            )
            raise
        finally:
            ctx.inflight.discard(me)
            if where is not None:
                self._chooser.inflight[i] -= 1
        rec = record_from_stream(
            res,
            scenario=link.scenario,
            worker=ctx.name,
            user=self.user_id,
            seq=ctx.next_seq(),
            endpoint=api,
            t_intended=link.t_intended,
            input_len=spec.input_len,
            output_len=spec.output_len,
            turn=link.turn,
            session=link.session,
        )
        if where is not None:
            rec.host = where.label
        rec.replica = res.replica
        if rec.error_detail and self._redactor.secrets:
            rec.error_detail = self._redactor.text(rec.error_detail)
        rec.request_class = spec.request_class  # the class, and the model when it is not the run's one
        rec.model = m if (m := spec.body.get("model")) != self.model else None
        if n_images:  # images: the parts sent and, where the text's count is exact, their tokens
            add_images(rec, n_images, spec.context.get("text_tokens"))
        if rec.error is None:
            flags = (
                rec.extra
            )  # the record's own (usage below the chunks, delivered at once): check() may replace
            self.check(spec, res, rec)
            if flags and rec.extra is not flags:
                rec.extra = {**(rec.extra or {}), **flags}
        if not res.done and res.error is None:  # complete, but without `data: [DONE]` (docs/failure_kinds.md)
            rec.extra = {**(rec.extra or {}), "no_done": True}  # after check(): scenarios set their own extra
        if (
            res.encoding
        ):  # a proxy compressed the body, the client decoded it (result.json: compressed_streams)
            rec.extra = {**(rec.extra or {}), "content_encoding": res.encoding}
        self._fire(rec)
        ctx.submit(rec)
        pause = self._backoff.after(rec.error)
        if pause and not self.options.open_loop:  # the open loop's schedule is its own bound
            self.think(pause)
        return Reply(res, rec)

    def _fire(self, rec: RequestRecord) -> None:
        """Locust's view: exactly one request per LLM request (response time E2EL ms, length output tokens).

        TTFT/TPOT/ITL are not fired: every fired event is a request to Locust (RPS, failures/s, the Aggregated
        row, CSVs, --html). The exact latencies live in the merged HdrHistograms (the web UI's LLM tab).
        """
        failed = rec.error is not None
        c = rec.chunk_times_us
        e2el_ms = (rec.end_us if failed or not c else c[-1]) / 1000.0
        exc = None
        if failed:
            exc = RequestFailure(f"{rec.error}: {rec.error_detail}" if rec.error_detail else str(rec.error))
        self.environment.events.request.fire(
            request_type=REQUEST_TYPE,
            name=rec.scenario,
            response_time=e2el_ms,
            response_length=0 if failed else (rec.output_tokens or 0),
            exception=exc,
            context={},
        )
