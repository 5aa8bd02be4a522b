"""Command-line and environment configuration of the simulator."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import NoReturn

ENV_PREFIX = "VLLM_LOCUST_SIM_"
MIB = 1024 * 1024


@dataclass
class SimConfig:
    """Every knob of the simulator; the argparse flags map 1:1 onto these fields."""

    host: str = "127.0.0.1"
    port: int = 8000
    reuse_port: bool = False
    model: str = "sim-model"
    max_model_len: int = 8192
    api_key: str | None = None
    require_header: str = ""  # 'Name: value' every request must carry (a gateway's credential), /metrics too
    max_body_bytes: int = 32 * MIB
    seed: int = 0
    # fixed (ground-truth) mode
    fixed: bool = False
    ttft_ms: float = 50.0
    itl_ms: float = 10.0
    tokens_per_chunk: int = 1
    chunks_per_write: int = 1
    # reasoning model: every chat answer (without tools) thinks first
    reasoning_tokens: int = 0
    reasoning_field: str = "reasoning_content"
    # pooling models: /v1/embeddings' vector length (docs/simulator.md "Pooling and Responses")
    embed_dim: int = 64
    # continuous-batching model (defaults: a 7B model on one H100-class GPU)
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    kv_cache_tokens: int = 200_000
    block_size: int = 16
    prefill_tokens_per_s: float = 20_000.0
    decode_step_ms: float = 8.0
    decode_per_seq_ms: float = 0.05
    decode_per_ctx_token_us: float = (
        0.0  # the twin's fit: decode cost per context token of the decoding sequences
    )
    prefill_per_ctx_token_ns: float = (
        0.0  # the twin's fit: prefill cost per prefilled token per token before it
    )
    # twin of a real server (docs/twin.md): a fixed cost per request, its constants from a profile, N engines
    request_overhead_ms: float = 0.0
    twin: str = ""
    replicas: int = 1
    replica_policy: str = "round-robin"
    # the API server in front of each engine (vllm_sim/apiserver.py): 0 processes = no such stage
    api_server_count: int = 0
    api_request_cost_us: float = 0.0
    api_prompt_token_cost_us: float = 0.0
    api_chunk_cost_us: float = 0.0
    # speculative decoding: K draft tokens per decode step, each accepted with probability P (in order)
    spec_tokens: int = 0
    spec_acceptance: float = 0.0
    # LoRA adapters and priority scheduling (vllm_sim/adapters.py), for traffic classes
    lora_modules: str = ""
    slow_adapter: str = ""
    scheduling_policy: str = "fcfs"
    enable_prefix_caching: bool = True
    enable_prompt_tokens_details: bool = False
    early_stop_prob: float = 0.3
    # MoE routing (our extension)
    num_experts: int = 0
    topk: int = 2
    router_skew: float = 1.2
    # faults
    fault_rate_500: float = 0.0
    fault_rate_429: float = 0.0
    fault_rate_close: float = 0.0
    fault_rate_torn: float = 0.0
    fault_rate_reset: float = 0.0
    fault_rate_stall: float = 0.0
    fault_rate_inband_error: float = 0.0
    fault_rate_delay_headers: float = 0.0
    fault_after_tokens: int = 4
    fault_stall_ms: float = 1000.0
    fault_delay_ms: float = 1000.0
    enable_control: bool = False
    # server quirks seen in the wild (every request): what a client's calibration and run must survive
    ignore_max_tokens: int = 0
    constant_prompt_tokens: int = 0
    # tokenizer and its API (to stand in for servers other than vLLM)
    tokenize_api: str = "vllm"
    chars_per_token: int = 0
    # runtime
    no_uvloop: bool = False
    log_level: str = "WARNING"


TOKENIZE_APIS = ("vllm", "llama.cpp", "none")
REASONING_FIELDS = ("reasoning_content", "reasoning")
REPLICA_POLICIES = ("round-robin", "least-loaded", "random", "prefix")
# another name for a policy: least-loaded already counts every request a replica holds (running + waiting)
POLICY_ALIASES = {"least-inflight": "least-loaded"}

_HELP = {
    "host": "address to listen on",
    "port": "port to listen on (0 = ephemeral)",
    "reuse_port": "SO_REUSEPORT: several simulator processes share one port, the kernel spreads connections",
    "model": "served model name",
    "max_model_len": "context length: prompt + max_tokens above it is a 400",
    "api_key": "require 'Authorization: Bearer KEY' (401 otherwise)",
    "require_header": "require the header 'NAME: VALUE' on every request, /metrics and /health too (401 otherwise): "
    "a gateway's own credential",
    "max_body_bytes": "request bodies above this size get a 413",
    "seed": "seed of the server-side RNG (EOS lengths, faults, routing)",
    "fixed": "ground-truth mode: every request gets exactly --ttft-ms / --itl-ms",
    "ttft_ms": "fixed mode: time to first token",
    "itl_ms": "fixed mode: time between SSE events",
    "tokens_per_chunk": "fixed mode: tokens per SSE event (like speculative decoding)",
    "chunks_per_write": "fixed mode: SSE events per TCP write (bursts)",
    "reasoning_tokens": "reasoning model: chat answers start with N thinking tokens (counted in max_tokens), "
    "streamed as reasoning deltas; usage.completion_tokens_details.reasoning_tokens says N",
    "reasoning_field": "the delta/message key of the thinking: reasoning_content or reasoning",
    "embed_dim": "length of each /v1/embeddings vector (pooling requests take decode_step_ms + the prefill "
    "of each input: its tokens / prefill_tokens_per_s and the --prefill-per-ctx-token-ns term)",
    "max_num_seqs": "most sequences running at once",
    "max_num_batched_tokens": "token budget of one engine step (chunked prefill)",
    "kv_cache_tokens": "KV-cache capacity in tokens",
    "block_size": "KV-cache block size in tokens",
    "prefill_tokens_per_s": "prefill speed on uncached prompt tokens",
    "decode_step_ms": "fixed cost of one engine step",
    "decode_per_seq_ms": "extra cost of one step per running sequence",
    "decode_per_ctx_token_us": "extra cost of one step per context token (prompt + output so far) of its decoding "
    "sequences, in microseconds: attention over the KV cache (0: none)",
    "prefill_per_ctx_token_ns": "extra cost of each prefilled token per token before it in its sequence (cached "
    "prefix included), in nanoseconds: prefill attention, quadratic in the prompt (0: none)",
    "request_overhead_ms": "fixed cost of each request before it is scheduled (HTTP, tokenizing): adds to TTFT",
    "twin": "twin profile (vllm-locust calibrate -o twin.json): its constants are the defaults; flags still win",
    "replicas": "N engines behind this one port (each with all the engine flags); /metrics sums them",
    "replica_policy": "how --replicas spreads requests (alias --router): round-robin, least-loaded (fewest in flight: "
    "running + waiting; also least-inflight), random (seeded), or prefix (the replica holding the longest prefix of "
    "the prompt, ties to the least loaded); each response says its replica in x-sim-replica",
    "api_server_count": "API-server processes in front of each engine, each one single-threaded queue (0: no such "
    "stage, requests reach the engine at once, and the --api-*-cost-us do not apply)",
    "api_request_cost_us": "API server: CPU per request (HTTP, validation, chat template) before it reaches the engine",
    "api_prompt_token_cost_us": "API server: CPU per prompt token (tokenizing), added to the request's cost",
    "api_chunk_cost_us": "API server: CPU per output chunk (detokenizing, SSE framing) before it is written",
    "spec_tokens": "speculative decoding: K draft tokens per decode step (0: off); a step emits 1 + accepted tokens",
    "spec_acceptance": "speculative decoding: probability that each draft token is accepted (the first rejection "
    "ends the run), seeded by --seed",
    "lora_modules": "LoRA adapter names served besides --model (a,b or vLLM's name=path items): in /v1/models "
    "and accepted as a request's model",
    "slow_adapter": "ADAPTER:FACTOR[,...]: that adapter's requests take FACTOR x as long per token",
    "scheduling_policy": "fcfs, or priority: the waiting queue by the body's priority (lower first), as vLLM",
    "enable_prefix_caching": "prefix caching by block hashes (on by default, like vLLM)",
    "enable_prompt_tokens_details": "add usage.prompt_tokens_details.cached_tokens (like vLLM's flag)",
    "early_stop_prob": "without ignore_eos: probability that EOS comes before max_tokens",
    "num_experts": "MoE: number of experts (0 = dense model)",
    "topk": "MoE: experts per token",
    "router_skew": "MoE: Zipf exponent of the router's expert popularity",
    "fault_after_tokens": "global-rate mid-stream faults strike after this many tokens",
    "fault_stall_ms": "global-rate stall length",
    "fault_delay_ms": "global-rate header delay",
    "enable_control": "serve POST /sim/control (down_for_s, stall_for_s)",
    "ignore_max_tokens": "quirk: every answer is N tokens whatever max_tokens asks (0: honour max_tokens)",
    "constant_prompt_tokens": "quirk: usage.prompt_tokens is always N whatever the prompt (0: the real count)",
    "tokenize_api": "POST /tokenize in vLLM's shape (vllm), llama.cpp's ({content} -> {tokens}: llama.cpp), or none (404)",
    "chars_per_token": "0: one token per word; N: a word is ceil(len/N) tokens (a vocabulary that splits rare words)",
    "no_uvloop": "use the stdlib event loop even when uvloop is installed",
    "log_level": "logging level (stderr)",
}


def _env_bool(text: str) -> bool:
    """Parse an environment boolean the usual way."""
    return text.strip().lower() in ("1", "true", "yes", "on")


class _OneLineParser(argparse.ArgumentParser):
    """argparse whose bad input is one line (`vllm-locust sim: error: ...`, exit 2), not the usage block."""

    def error(self, message: str) -> NoReturn:
        """Print the one line and exit 2 (bad input, as every vllm-locust command)."""
        sys.stderr.write(f"{self.prog}: error: {message} (--help lists the options)\n")
        sys.exit(2)


def build_parser(env: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """Build the argparse parser; defaults come from VLLM_LOCUST_SIM_<FLAG> env vars."""
    env = os.environ if env is None else env
    parser = _OneLineParser(
        prog="vllm-locust sim",
        description="vLLM-compatible simulator (OpenAI API, continuous-batching latency model)",
    )
    for f in fields(SimConfig):
        flag = "--" + f.name.replace("_", "-")
        env_name = ENV_PREFIX + f.name.upper()
        default = f.default
        help_text = _HELP.get(f.name, f.name.replace("_", " "))
        raw = env.get(env_name)
        if f.type in ("bool",):
            if raw is not None:
                default = _env_bool(raw)
            if f.name == "enable_prefix_caching":
                parser.add_argument(
                    flag,
                    action=argparse.BooleanOptionalAction,
                    default=default,
                    help=f"{help_text} [env {env_name}]",
                )
            else:
                parser.add_argument(
                    flag, action="store_true", default=default, help=f"{help_text} [env {env_name}]"
                )
            continue
        conv: type = {"int": int, "float": float}.get(str(f.type), str)
        if raw is not None:
            default = conv(raw)
        parser.add_argument(flag, type=conv, default=default, help=f"{help_text} [env {env_name}]")
    # the name a router takes elsewhere ("--router prefix"): the same setting, so --sim-args read either way
    parser.add_argument(
        "--router", dest="replica_policy", default=argparse.SUPPRESS, help="alias of --replica-policy"
    )
    return parser


def parse_config(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> SimConfig:
    """Parse argv (and env) into a validated SimConfig."""
    parser = build_parser(env)
    _apply_twin(parser, argv)
    ns = parser.parse_args(argv)
    cfg = SimConfig(**vars(ns))
    cfg.replica_policy = POLICY_ALIASES.get(cfg.replica_policy, cfg.replica_policy)
    problems = []
    if not 0 <= cfg.port <= 65535:  # bind() would raise OverflowError, a traceback
        problems.append(f"--port must be 0-65535 (0: any free port), not {cfg.port}")
    if cfg.block_size < 1:
        problems.append("--block-size must be >= 1")
    if cfg.max_num_seqs < 1:
        problems.append("--max-num-seqs must be >= 1")
    if cfg.tokens_per_chunk < 1 or cfg.chunks_per_write < 1:
        problems.append("--tokens-per-chunk and --chunks-per-write must be >= 1")
    if cfg.kv_cache_tokens < cfg.block_size:
        problems.append("--kv-cache-tokens must hold at least one block")
    if cfg.embed_dim < 1:
        problems.append("--embed-dim must be >= 1")
    problems += adapter_problems(cfg)  # --lora-modules, --slow-adapter, --scheduling-policy
    if cfg.prefill_tokens_per_s <= 0:
        problems.append("--prefill-tokens-per-s must be > 0")
    if cfg.max_num_batched_tokens < 1:
        problems.append("--max-num-batched-tokens must be >= 1")
    if cfg.tokenize_api not in TOKENIZE_APIS:
        problems.append(f"--tokenize-api must be one of {', '.join(TOKENIZE_APIS)}")
    if cfg.chars_per_token < 0:
        problems.append("--chars-per-token must be >= 0")
    if cfg.reasoning_tokens < 0:
        problems.append("--reasoning-tokens must be >= 0")
    if cfg.reasoning_field not in REASONING_FIELDS:
        problems.append(f"--reasoning-field must be one of {', '.join(REASONING_FIELDS)}")
    if cfg.ignore_max_tokens < 0 or cfg.constant_prompt_tokens < 0:
        problems.append("--ignore-max-tokens and --constant-prompt-tokens must be >= 0")
    if cfg.replicas < 1:
        problems.append("--replicas must be >= 1")
    if cfg.replica_policy not in REPLICA_POLICIES:
        problems.append(f"--replica-policy must be one of {', '.join(REPLICA_POLICIES)}")
    if cfg.replicas > 1 and cfg.fixed:
        problems.append("--replicas is for the batching model, not --fixed")
    problems += api_spec_problems(cfg)
    if cfg.request_overhead_ms < 0:
        problems.append("--request-overhead-ms must be >= 0")
    if cfg.decode_per_ctx_token_us < 0:
        problems.append("--decode-per-ctx-token-us must be >= 0")
    if cfg.prefill_per_ctx_token_ns < 0:
        problems.append("--prefill-per-ctx-token-ns must be >= 0")
    if problems:
        parser.error("; ".join(problems))
    return cfg


def args_problem(argv: list[str]) -> str | None:
    """What is wrong with the simulator flags `argv`, in argparse's one line ("unrecognized arguments: --x"),
    without starting anything; None when they parse and validate. A caller that starts the simulator (another
    process) says it before, rather than a timeout wrapped around the usage text."""
    import contextlib
    import io

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
            parse_config(argv)
    except SystemExit as e:
        if not e.code:  # --help: it prints and exits, it sets nothing
            return "--help asks for the simulator's flags (vllm-locust sim --help); it sets nothing"
        lines = [ln for ln in said.getvalue().splitlines() if ln.strip()]
        return lines[-1].split(": error: ", 1)[-1] if lines else f"exit {e.code}"
    return None


def _apply_twin(parser: argparse.ArgumentParser, argv: list[str] | None) -> None:
    """With --twin FILE, the profile's constants become the defaults (flags given beside it still win); a profile
    that cannot be used is one line on stderr and exit 2."""
    from .twin import TwinError, load_twin

    known, _ = parser.parse_known_args(argv)
    if not known.twin:
        return
    try:
        parser.set_defaults(**load_twin(known.twin))
    except TwinError as e:
        sys.stderr.write(f"{parser.prog}: error: {e}\n")
        raise SystemExit(2) from None


def adapter_problems(cfg: SimConfig) -> list[str]:
    """What is wrong with the LoRA and scheduling flags, one line each."""
    from .adapters import POLICIES, parse_lora_modules, parse_slow

    try:
        parse_slow(cfg.slow_adapter, parse_lora_modules(cfg.lora_modules))
    except ValueError as e:
        return [str(e)]
    if cfg.scheduling_policy not in POLICIES:
        return [f"--scheduling-policy must be one of {', '.join(POLICIES)}"]
    return []


def api_spec_problems(cfg: SimConfig) -> list[str]:
    """What is wrong with the API-server and speculative-decoding flags, one line each."""
    out = []
    if cfg.api_server_count < 0:
        out.append("--api-server-count must be >= 0")
    costs = (cfg.api_request_cost_us, cfg.api_prompt_token_cost_us, cfg.api_chunk_cost_us)
    if any(c < 0 for c in costs):
        out.append("--api-request-cost-us, --api-prompt-token-cost-us and --api-chunk-cost-us must be >= 0")
    if cfg.spec_tokens < 0:
        out.append("--spec-tokens must be >= 0")
    if not 0.0 <= cfg.spec_acceptance <= 1.0:
        out.append("--spec-acceptance must be between 0 and 1")
    if cfg.spec_tokens and cfg.fixed:
        out.append("--spec-tokens is for the batching model, not --fixed (use --tokens-per-chunk)")
    return out
