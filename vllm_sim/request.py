"""Validate OpenAI request bodies the way vLLM does and turn them into a generation plan."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import secrets
from dataclasses import dataclass, field
from typing import Any

from . import images
from . import tokenizer as tok
from .adapters import priority_of
from .schema_gen import generate

# error type names of vLLM's ErrorResponse, by status
ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    413: "BadRequestError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class ApiError(Exception):
    """An error answered as vLLM's ``{"error": {...}}`` body."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind

    def body(self) -> bytes:
        """The JSON body vLLM sends for this error."""
        return error_body(self.status, self.message, self.param, self.kind)


def json_object(raw: bytes) -> dict[str, Any]:
    """A request body that must be one JSON object (the pooling, Responses and tokenize routes); ApiError 400."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"Invalid JSON body: {e}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "Request body must be a JSON object")
    return body


def error_body(status: int, message: str, param: str | None = None, kind: str | None = None) -> bytes:
    """vLLM's error JSON: ``{"error": {"message", "type", "param", "code"}}``."""
    return json.dumps(
        {
            "error": {
                "message": message,
                "type": kind or ERROR_TYPES.get(status, "BadRequestError"),
                "param": param,
                "code": status,
            }
        },
        separators=(",", ":"),
    ).encode()


def _validation_error(kind: str, loc: str, msg: str, inp: str, ctx: str = "") -> ApiError:
    """FastAPI request-validation errors as vLLM 0.32 renders them (type "Bad Request", param = loc)."""
    extra = f", 'ctx': {{'error': '{ctx}'}}" if ctx else ""
    return ApiError(
        400,
        f"1 validation error:\n  {{'type': '{kind}', 'loc': '{loc}', 'msg': '{msg}', "
        f"'input': '{inp}'{extra}}}",
        loc,
        "Bad Request",
    )


@dataclass
class Plan:
    """What a request will produce: output pieces (one per token) and how it ends."""

    pieces: list[str]
    finish_reason: str
    tool_name: str | None = None
    tool_id: str | None = None
    reasoning: int = (
        0  # the first `reasoning` pieces are thinking (--reasoning-tokens), streamed as reasoning deltas
    )
    reasoning_key: str = "reasoning_content"

    @property
    def n_tokens(self) -> int:
        """Completion tokens (tool calls count their header delta as one)."""
        return len(self.pieces) + (1 if self.tool_name else 0)


@dataclass
class SimRequest:
    """A validated completion or chat request."""

    chat: bool
    stream: bool
    model: str
    prompt_ids: list[int]
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = False
    include_usage: bool = False
    continuous_usage: bool = False
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    schema: dict[str, Any] | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = "auto"
    request_id: str = ""
    api: str = ""  # "responses": /v1/responses on the chat engine (vllm_sim/responses.py writes it)
    priority: int = 0  # vLLM's `priority` extension: lower first under --scheduling-policy priority

    @property
    def prompt_tokens(self) -> int:
        """Prompt length in tokens."""
        return len(self.prompt_ids)


def _int_field(body: dict[str, Any], name: str, lo: int) -> int | None:
    """Read an optional integer field, rejecting wrong types and values below ``lo``."""
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ApiError(400, f"{name} must be an integer, got {v!r}", name)
    if v < lo:
        raise ApiError(400, f"{name} must be at least {lo}, got {v}.", name)
    return v


def _schema_of(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema the output must follow, from any of vLLM's spellings; None for free text."""
    rf = body.get("response_format")
    if isinstance(rf, dict):
        if rf.get("type") == "json_object":
            return {"type": "object"}
        if rf.get("type") == "json_schema":
            js = rf.get("json_schema")
            if not isinstance(js, dict):
                raise ApiError(400, "response_format.json_schema is required", "response_format")
            sch = js.get("schema", js.get("json_schema", {}))
            return sch if isinstance(sch, dict) else {"type": "object"}
    so = body.get("structured_outputs")
    if isinstance(so, dict) and so.get("json") is not None:
        j = so["json"]
        return json.loads(j) if isinstance(j, str) else j if isinstance(j, dict) else {"type": "object"}
    gj = body.get("guided_json")
    if gj is not None:
        return json.loads(gj) if isinstance(gj, str) else gj if isinstance(gj, dict) else {"type": "object"}
    return None


def parse_request(
    raw: bytes, chat: bool, served_model: str, max_model_len: int, adapters: tuple[str, ...] = ()
) -> SimRequest:
    """Parse and validate a request body; raise ApiError with vLLM's status and message (`adapters`: the LoRA
    names served besides the model)."""
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as e:
        raise _validation_error(
            "json_invalid", f"body.{e.pos}", "JSON decode error", "<dict of 0 items>", e.msg
        ) from None
    except (ValueError, UnicodeDecodeError):
        raise _validation_error(
            "json_invalid", "body.0", "JSON decode error", "<dict of 0 items>", "Invalid encoding"
        ) from None
    if not isinstance(body, dict):
        raise _validation_error(
            "model_attributes_type", "body", "Input should be a valid dictionary", type(body).__name__
        )
    model = body.get("model")
    if model is None:
        model = served_model
    if not isinstance(model, str):
        raise ApiError(400, "model must be a string", "model")
    if model != served_model and model not in adapters:
        raise ApiError(404, f"The model `{model}` does not exist. Valid aliases: {served_model}.", "model")
    try:
        priority = priority_of(body)
    except ValueError as e:
        raise ApiError(400, str(e), "priority") from None
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise _validation_error(
                "missing" if messages is None else "list_type",
                "body.messages",
                "Field required" if messages is None else "Input should be a valid list",
                f"<dict of {len(body)} items>",
            )
        try:  # image parts add their tokens by resolution (vllm_sim/images.py)
            prompt_ids = images.encode_chat(messages)
        except ValueError as e:
            raise ApiError(400, str(e), "messages") from None
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            prompt_ids = tok.encode_text(prompt)
        elif (
            isinstance(prompt, list)
            and prompt
            and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
        ):
            prompt_ids = [int(t) for t in prompt]
        else:
            raise _validation_error(
                "missing" if prompt is None else "string_type",
                "body.prompt",
                "Field required" if prompt is None else "Input should be a valid string",
                f"<dict of {len(body)} items>",
            )
    n = body.get("n", 1)
    if n != 1:
        raise ApiError(400, "The simulator supports n=1 only.", "n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool) and stream is not None:
        raise ApiError(400, "stream must be a boolean", "stream")
    stream = bool(stream)
    so = body.get("stream_options")
    if so is not None and not stream:
        raise ApiError(400, "Stream options can only be defined when `stream=True`.", "stream_options")
    if so is not None and not isinstance(so, dict):
        raise ApiError(400, "stream_options must be an object", "stream_options")
    mt = _int_field(body, "max_completion_tokens", 1)
    if mt is None:
        mt = _int_field(body, "max_tokens", 1)
    plen = len(prompt_ids)
    if plen >= max_model_len:
        shown = min(plen, max_model_len + 1)
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, your prompt "
            f"contains at least {shown} input tokens, which exceeds this limit even without any output "
            f"tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value={shown})",
            "input_tokens",
        )
    if mt is not None and mt > max_model_len:
        raise ApiError(
            400,
            f"max_tokens={mt} cannot be greater than max_model_len={max_model_len}. Please "
            f"request fewer output tokens. (parameter=max_tokens, value={mt})",
            "max_tokens",
        )
    if mt is None:
        mt = max_model_len - plen
    if plen + mt > max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{mt} output tokens and your prompt contains at least {plen} input tokens, for a total of at "
            f"least {plen + mt} tokens. Please reduce the length of the input prompt or the number of "
            f"requested output tokens. (parameter=input_tokens, value={plen})",
            "input_tokens",
        )
    min_tokens = _int_field(body, "min_tokens", 0) or 0
    if min_tokens > mt:
        raise ApiError(
            400, f"min_tokens must be less than or equal to max_tokens={mt}, got {min_tokens}.", "min_tokens"
        )
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ApiError(400, "seed must be an integer", "seed")
    stop = body.get("stop")
    stops = (
        [stop]
        if isinstance(stop, str)
        else [s for s in stop if isinstance(s, str)]
        if isinstance(stop, list)
        else []
    )
    try:
        schema = _schema_of(body)
    except ValueError:
        raise ApiError(400, "invalid JSON schema", "response_format") from None
    tools = body.get("tools") if chat else None
    tools = (
        [t for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
        if isinstance(tools, list)
        else []
    )
    tool_choice = body.get("tool_choice", "auto" if tools else "none")
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if not any(t["function"].get("name") == name for t in tools):
            raise ApiError(400, f"Tool '{name}' has not been passed in `tools`.", "tool_choice")
    elif tool_choice == "required" and not tools:
        raise ApiError(400, "tool_choice 'required' needs `tools`", "tool_choice")
    return SimRequest(
        chat=chat,
        stream=stream,
        model=model,
        prompt_ids=prompt_ids,
        max_tokens=mt,
        min_tokens=min_tokens,
        ignore_eos=bool(body.get("ignore_eos", False)),
        include_usage=bool(so.get("include_usage")) if isinstance(so, dict) else False,
        continuous_usage=bool(so.get("continuous_usage_stats")) if isinstance(so, dict) else False,
        seed=seed,
        stop=stops,
        schema=schema,
        tools=tools,
        tool_choice=tool_choice,
        request_id=("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(8),
        priority=priority,
    )


def _eos_length(req: SimRequest, rng: random.Random, early_stop_prob: float) -> int:
    """Output length: max_tokens with ignore_eos, else EOS early with ``early_stop_prob``."""
    if req.ignore_eos or rng.random() >= early_stop_prob:
        return req.max_tokens
    return rng.randint(max(req.min_tokens, 1), req.max_tokens)


def _apply_stop(pieces: list[str], stops: list[str]) -> tuple[list[str], bool]:
    """Cut the output at the first stop string (excluded, as vLLM does by default)."""
    text = "".join(pieces)
    first = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
    if first < 0:
        return pieces, False
    out: list[str] = []
    pos = 0
    for p in pieces:
        if pos + len(p) >= first:
            out.append(p[: first - pos])
            break
        out.append(p)
        pos += len(p)
    return out, True


def _seeded(req: SimRequest) -> int:
    """The answer's random state of a seeded request: the body's seed mixed with its prompt, so the same request
    answers alike (a seeded server's promise) while a run of different prompts under one seed still gets a
    spread of answers (from the seed alone, every answer of a run had one length)."""
    h = hashlib.blake2b(str(req.seed).encode(), digest_size=8)
    h.update(repr(req.prompt_ids).encode())
    return int.from_bytes(h.digest(), "little")


def build_plan(
    req: SimRequest,
    server_rng: random.Random,
    early_stop_prob: float,
    reasoning_tokens: int = 0,
    reasoning_key: str = "reasoning_content",
) -> Plan:
    """Decide the whole output of a request up front (deterministic given ``seed``).

    With ``reasoning_tokens`` (chat, no tool call) the output starts with that many thinking tokens, counted
    in max_tokens like a reasoning model's; the answer gets what is left."""
    rng = random.Random(_seeded(req)) if req.seed is not None else random.Random(server_rng.getrandbits(64))
    if reasoning_tokens > 0 and req.chat and not req.tools:  # tool calls: no thinking first (not modelled)
        r = min(reasoning_tokens, req.max_tokens)
        thought = tok.sample_words(rng, r)
        if r >= req.max_tokens:
            return Plan(thought, "length", reasoning=r, reasoning_key=reasoning_key)
        rest = dataclasses.replace(req, max_tokens=req.max_tokens - r, min_tokens=max(0, req.min_tokens - r))
        answer = _answer_plan(rest, rng, early_stop_prob)
        return Plan(thought + answer.pieces, answer.finish_reason, reasoning=r, reasoning_key=reasoning_key)
    return _answer_plan(req, rng, early_stop_prob)


def _answer_plan(req: SimRequest, rng: random.Random, early_stop_prob: float) -> Plan:
    """The output without reasoning: a tool call, a JSON document or words."""
    tool = _pick_tool(req, rng)
    if tool is not None:
        params = tool["function"].get("parameters") or {"type": "object", "properties": {}}
        args = json.dumps(generate(params, rng))
        pieces = tok.split_pieces(args)
        if len(pieces) + 1 > req.max_tokens:
            return Plan(
                pieces[: req.max_tokens - 1],
                "length",
                str(tool["function"].get("name")),
                "chatcmpl-tool-" + secrets.token_hex(8),
            )
        return Plan(
            pieces, "tool_calls", str(tool["function"].get("name")), "chatcmpl-tool-" + secrets.token_hex(8)
        )
    if req.schema is not None:
        pieces = tok.split_pieces(json.dumps(generate(req.schema, rng)))
        if len(pieces) > req.max_tokens:
            return Plan(pieces[: req.max_tokens], "length")
        return Plan(pieces, "stop")
    n = _eos_length(req, rng, early_stop_prob)
    pieces = tok.sample_words(rng, n)
    if req.stop:
        pieces, stopped = _apply_stop(pieces, req.stop)
        if stopped:
            return Plan(pieces, "stop")
    return Plan(pieces, "length" if n == req.max_tokens else "stop")


def _pick_tool(req: SimRequest, rng: random.Random) -> dict[str, Any] | None:
    """The tool this request calls, or None to answer with text (``auto`` flips a seeded coin)."""
    if not req.tools or req.tool_choice == "none":
        return None
    if isinstance(req.tool_choice, dict):
        name = req.tool_choice["function"].get("name")
        return next(t for t in req.tools if t["function"].get("name") == name)
    if req.tool_choice == "required" or rng.random() < 0.5:
        return rng.choice(req.tools)
    return None
