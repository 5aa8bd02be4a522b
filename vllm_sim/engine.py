"""The two engines: exact ground truth (``--fixed``) and a continuous-batching latency model.

Neither uses a timer per request: the fixed engine keeps one deadline heap and one ``call_at`` for
its earliest entry; the batching engine runs one step at a time, like vLLM's scheduler loop.
"""

from __future__ import annotations

import asyncio
import heapq
import random
from collections import deque

from .adapters import insert_by_priority, parse_lora_modules, parse_slow
from .config import SimConfig
from .hrtimer import EARLY_S, EarliestDeadline
from .kvcache import BlockManager, SeqBlocks, block_hashes
from .metrics import SimStats
from .stream import Status, Stream


class MoeRouter:
    """Seeded, skewed (Zipf) router: counts tokens per expert (our extension of vLLM's metrics)."""

    def __init__(self, cfg: SimConfig, stats: SimStats) -> None:
        self.n = cfg.num_experts
        self.k = max(1, min(cfg.topk, self.n)) if self.n else 0
        self.weights = [1.0 / (i + 1) ** cfg.router_skew for i in range(self.n)]
        self.rng = random.Random(cfg.seed + 7)
        self.stats = stats

    def route(self, tokens: int) -> None:
        """Route ``tokens`` tokens to ``topk`` experts each (sampled for up to 512 tokens, scaled above)."""
        if not self.n or tokens <= 0:
            return
        sample = min(tokens, 512)
        counts = [0] * self.n
        for e in self.rng.choices(range(self.n), weights=self.weights, k=sample * self.k):
            counts[e] += 1
        # scale the sample to the real count, keeping the exact total of tokens × topk
        total = tokens * self.k
        scaled = [c * tokens // sample for c in counts]
        scaled[counts.index(max(counts))] += total - sum(scaled)
        for i, c in enumerate(scaled):
            self.stats.expert_tokens[i] += c


class FixedEngine:
    """Ground truth: write w of a request happens at arrival + ttft + w·chunks_per_write·itl (+ stalls)."""

    def __init__(self, cfg: SimConfig, stats: SimStats, router: MoeRouter) -> None:
        self.loop = asyncio.get_event_loop()
        self.stats = stats
        self.router = router
        self.ttft = cfg.ttft_ms / 1000.0
        self.per_event = cfg.tokens_per_chunk
        self.per_write = cfg.tokens_per_chunk * cfg.chunks_per_write
        self.write_gap = cfg.chunks_per_write * cfg.itl_ms / 1000.0
        self.heap: list[tuple[float, int, Stream]] = []
        self.counter = 0
        self.timer = EarliestDeadline(self.loop, self._fire)
        self.live = 0
        self.paused_until = 0.0
        self.slow = parse_slow(cfg.slow_adapter, parse_lora_modules(cfg.lora_modules))  # --slow-adapter

    def _due(self, s: Stream) -> float:
        """When the stream's next write is due: TTFT + writes x gap, stretched for a --slow-adapter's requests."""
        t = self.ttft + s.writes * self.write_gap
        return s.arrival + s.shift + (t * self.slow.get(s.req.model, 1.0) if self.slow else t)

    def submit(self, s: Stream) -> None:
        """Start a request (its arrival time is already set); a control stall delays it too."""
        self.live += 1
        self.stats.running = self.live
        if self.paused_until > s.arrival:
            s.shift = self.paused_until - s.arrival
        self._push(self._due(s), s)
        self._arm()

    def _push(self, when: float, s: Stream) -> None:
        self.counter += 1
        heapq.heappush(self.heap, (when, self.counter, s))

    def _arm(self) -> None:
        """Keep exactly one timer, at the earliest deadline."""
        if self.heap:
            self.timer.wake_by(self.heap[0][0])

    def _fire(self) -> None:
        """Emit every write due now (coalesced), then re-arm."""
        now = self.loop.time()
        horizon = now + self.timer.coalesce
        heap = self.heap
        late_hist = self.stats.lateness
        produced = 0
        while heap and heap[0][0] <= horizon:
            due, _, s = heapq.heappop(heap)
            late = now - due
            late_hist.observe(late if late > 0 else 0.0)
            before = s.done
            st = s.produce(self.per_write, now, self.per_event)
            produced += s.done - before
            if st is Status.CONTINUE:
                s.writes += 1
                self._push(self._due(s), s)
            elif st is Status.STALLED:
                s.shift += s.stall_ms / 1000.0
                s.writes += 1
                self._push(self._due(s), s)
            else:
                self.live -= 1
        self.stats.running = self.live
        self.router.route(produced)
        self._arm()

    def stall_all(self, seconds: float) -> None:
        """Control: shift every pending deadline by ``seconds``; requests arriving meanwhile wait too."""
        self.paused_until = self.loop.time() + seconds
        self.heap = [(d + seconds, c, s) for d, c, s in self.heap]
        for _, _, s in self.heap:
            s.shift += seconds
        heapq.heapify(self.heap)
        self.timer.cancel()
        self._arm()


class _Seq:
    """Scheduler state of one request in the batching engine."""

    __slots__ = (
        "s",
        "blocks",
        "prompt_len",
        "target",
        "computed",
        "chunk",
        "admitted",
        "cached_once",
        "credit",
        "slow",
        "key",
    )

    def __init__(self, s: Stream, hashes: list[int]) -> None:
        self.s = s
        self.blocks = SeqBlocks(hashes)
        self.prompt_len = s.req.prompt_tokens
        self.target = self.prompt_len  # tokens to (re)compute before the next token comes out
        self.computed = 0
        self.chunk = 0
        self.admitted = False
        self.cached_once = False
        self.credit = 0.0  # --slow-adapter: tokens owed; one comes out once a whole one has accrued
        self.slow = 1.0
        self.key = (s.req.priority, s.arrival)  # --scheduling-policy priority: lower first, then arrival


def prefill_pairs(start: int, n: int) -> int:
    """Token pairs a prefill chunk of ``n`` tokens from position ``start`` attends over (each token over those
    before it in its sequence, cached ones included): n·start + n(n-1)/2, so chunks sum to the whole prompt's."""
    return n * start + n * (n - 1) // 2


def step_seconds(
    cfg: SimConfig, seqs: int, context_tokens: int, prefill_tokens: int, pairs: int = 0
) -> float:
    """One engine step's duration: a fixed cost, a cost per sequence, per context token of the decoding
    sequences (attention over their KV cache), per prefilled token, and per prefill token pair (``pairs``:
    prefill attention, quadratic in the prompt)."""
    return (
        (
            cfg.decode_step_ms
            + cfg.decode_per_seq_ms * seqs
            + cfg.decode_per_ctx_token_us * context_tokens / 1000.0
        )
        / 1000.0
        + prefill_tokens / cfg.prefill_tokens_per_s
        + cfg.prefill_per_ctx_token_ns * pairs / 1e9
    )


def _key(q: _Seq) -> tuple[int, float]:
    return q.key


class BatchingEngine:
    """Continuous batching: admission by max-num-seqs and KV blocks, chunked prefill, one decode step."""

    def __init__(self, cfg: SimConfig, stats: SimStats, router: MoeRouter) -> None:
        self.loop = asyncio.get_event_loop()
        self.cfg = cfg
        self.stats = stats
        self.router = router
        self.bm = BlockManager(
            cfg.kv_cache_tokens // cfg.block_size, cfg.block_size, cfg.enable_prefix_caching
        )
        self.waiting: deque[_Seq] = deque()
        self.running: list[_Seq] = []
        self.stepping = False
        self.paused_until = 0.0
        self.priority = cfg.scheduling_policy == "priority"  # waiting queue by priority: vllm_sim/adapters.py
        self.slow = parse_slow(cfg.slow_adapter, parse_lora_modules(cfg.lora_modules))
        self.spec_k = cfg.spec_tokens  # --spec-tokens: drafts per decode step (0: off)
        self.spec_p = cfg.spec_acceptance
        self.spec_rng = random.Random(cfg.seed + 11)

    def _queue(self, q: _Seq, front: bool = False) -> None:
        """Put `q` in the waiting queue: FCFS at the back (a preempted one at the front), or by priority."""
        if self.priority:
            insert_by_priority(self.waiting, q, _key)
        elif front:
            self.waiting.appendleft(q)
        else:
            self.waiting.append(q)

    def submit(self, s: Stream) -> None:
        """Queue a request; start the step loop when idle."""
        q = _Seq(s, block_hashes(s.req.prompt_ids, self.cfg.block_size))
        if self.slow:
            q.slow = self.slow.get(s.req.model, 1.0)
        self._queue(q)
        self.stats.waiting = len(self.waiting)
        if not self.stepping:
            self.stepping = True
            self.loop.call_soon(self._start, self.loop.time())

    def stall_all(self, seconds: float) -> None:
        """Control: no step starts for ``seconds``."""
        self.paused_until = self.loop.time() + seconds

    def _drop(self, q: _Seq) -> None:
        """Forget a sequence and free its blocks."""
        self.bm.release(q.blocks)

    def _admit(self, now: float) -> None:
        """Admit waiting requests in FCFS order while seats and KV blocks last."""
        cfg = self.cfg
        while self.waiting and len(self.running) < cfg.max_num_seqs:
            q = self.waiting[0]
            if q.s.cancelled or q.s.conn.closed:
                self.waiting.popleft()
                continue
            need = q.target + 1
            cached = self.bm.allocate(q.blocks, need)
            if cached is None:
                if not self.running and self.bm.blocks_for(need) > self.bm.total:
                    # can never fit: fail it rather than block the queue forever
                    self.waiting.popleft()
                    q.s.conn.respond(
                        400,
                        b'{"error":{"message":"Prompt does not fit in the KV cache",'
                        b'"type":"BadRequestError","param":null,"code":400}}',
                    )
                    continue
                break
            self.waiting.popleft()
            q.computed = cached
            if not q.admitted:
                q.admitted = True
                self.stats.queue.observe(now - q.s.arrival)
                self.stats.prefix_queries += q.prompt_len
                self.stats.prefix_hits += cached
                self.stats.prompt_tokens += q.prompt_len
                q.s.set_cached(cached)
            self.running.append(q)

    def _preempt_for(self, q: _Seq) -> bool:
        """Free blocks for ``q`` by preempting (recompute) the latest-admitted others; False if q itself went."""
        while self.bm.available() < 1:
            # vLLM: FCFS preempts the latest admitted; priority scheduling the lowest priority (latest arrival)
            victim = max(self.running, key=_key) if self.priority else self.running[-1]
            self.running.remove(victim)
            self.bm.release(victim.blocks)
            victim.target = victim.prompt_len + victim.s.done
            victim.computed = 0
            victim.chunk = 0
            self._queue(victim, front=True)
            self.stats.preemptions += 1
            if victim is q:
                return False
        return True

    def _start(self, t0: float) -> None:
        """Plan one step starting at ``t0`` and schedule its end."""
        now = self.loop.time()
        if now < self.paused_until:
            self.loop.call_at(self.paused_until, self._start, self.paused_until)
            return
        cfg = self.cfg
        alive = []
        for q in self.running:
            if q.s.cancelled or q.s.conn.closed:
                self._drop(q)
            else:
                alive.append(q)
        self.running = alive
        self._admit(now)
        budget = cfg.max_num_batched_tokens
        decoders: list[_Seq] = []
        preempted = 0
        wake = 0.0
        for q in list(self.running):
            if q.computed < q.target:
                continue
            if q.s.stalled_until > now:
                wake = min(wake, q.s.stalled_until) if wake else q.s.stalled_until
                continue
            # the next token (and, speculating, its K drafts) needs room for one more KV entry each
            ok = True
            while q.prompt_len + q.s.done + 1 + self.spec_k > q.blocks.n_blocks * cfg.block_size:
                before = self.stats.preemptions
                ok = self._preempt_for(q)
                preempted += self.stats.preemptions - before
                if not ok:
                    break
                self.bm.grow(q.blocks)
            if not ok:
                break  # q was the last running sequence: the rest were preempted before it
            decoders.append(q)
        if preempted:
            live = {id(q) for q in self.running}
            decoders = [q for q in decoders if id(q) in live]
        budget -= len(decoders) * (1 + self.spec_k)  # a speculating sequence verifies its K drafts too
        prefill_tokens = 0
        pairs = 0
        per_pair = cfg.prefill_per_ctx_token_ns  # --prefill-per-ctx-token-ns: 0 unless set (hot path)
        prefillers: list[_Seq] = []
        for q in self.running:
            if q.computed < q.target and budget > 0:
                q.chunk = min(q.target - q.computed, budget)
                budget -= q.chunk
                prefill_tokens += q.chunk
                if per_pair:
                    pairs += prefill_pairs(q.computed, q.chunk)  # from its position: the cached prefix counts
                prefillers.append(q)
        self.stats.running = len(self.running)
        self.stats.waiting = len(self.waiting)
        self.stats.kv_usage = self.bm.usage()
        if not decoders and not prefillers:
            if wake:
                self.loop.call_at(wake, self._start, wake)
            else:
                self.stepping = False
            return
        # a decoding sequence attends over its whole context (prompt + tokens so far): --decode-per-ctx-token-us
        ctx = sum(q.prompt_len + q.s.done for q in decoders) if cfg.decode_per_ctx_token_us else 0
        # verifying K drafts per decoding sequence costs what prefilling K tokens does (the drafter itself: free)
        verified = self.spec_k * len(decoders)
        dur = step_seconds(cfg, len(decoders) + len(prefillers), ctx, prefill_tokens + verified, pairs)
        t_end = max(t0, now - 0.001) + dur  # a late start is absorbed, never accumulated beyond 1 ms
        self.loop.call_at(t_end - EARLY_S, self._end, t_end, decoders, prefillers, prefill_tokens)

    def _draft(self) -> int:
        """Draft tokens accepted in one decode step: the leading successes of K Bernoulli(P) (vLLM's rejection
        sampler stops at the first rejection); counted in vLLM's spec_decode counters."""
        k, p, rnd = self.spec_k, self.spec_p, self.spec_rng.random
        a = 0
        while a < k and rnd() < p:
            a += 1
        st = self.stats
        st.spec_drafts += 1
        st.spec_draft_tokens += k
        st.spec_accepted += a
        per = st.spec_accepted_per_pos
        for i in range(a):
            per[i] += 1
        return a

    def _end(self, t_end: float, decoders: list[_Seq], prefillers: list[_Seq], prefill_tokens: int) -> None:
        """Finish a step: emit one token per decoding sequence and per completed prefill."""
        now = self.loop.time()
        late = now - t_end
        emitters = list(decoders)
        n_dec = len(
            emitters
        )  # decoders come first: only they speculate (a prefill's first token has no draft)
        spec = self.spec_k
        for q in prefillers:
            q.computed += q.chunk
            q.chunk = 0
            if q.computed >= q.target:
                if not q.cached_once:
                    self.bm.commit(q.blocks)
                    q.cached_once = True
                emitters.append(q)
        done: set[int] = set()
        for idx, q in enumerate(emitters):
            if q.s.cancelled:
                done.add(id(q))
                continue
            if (
                q.slow > 1.0
            ):  # --slow-adapter: a token every `slow` steps (its prefill and decode take longer)
                q.credit += 1.0 / q.slow
                if q.credit < 1.0 - 1e-9:
                    continue
                q.credit -= 1.0
            n = 1 + self._draft() if spec and idx < n_dec else 1
            st = q.s.produce(n, now, n)  # accepted drafts come out with the token, in one chunk
            if st is Status.FINISHED or st is Status.HUNG:
                done.add(id(q))
        self.stats.lateness.observe_many(late if late > 0 else 0.0, max(1, len(emitters)))
        self.router.route(len(decoders) + prefill_tokens)
        if done:
            keep = []
            for q in self.running:
                if id(q) in done:
                    self.bm.release(q.blocks)
                else:
                    keep.append(q)
            self.running = keep
        self._start(t_end)
