"""Prompts built off the event loop, ahead of their requests, so a tokenizer never holds the event loop.

An exact-length prompt (`--tokenizer`) costs several tokenizations: about 1 ms at 128 tokens and 12 ms at 1,024
on one core, all of it holding a worker's gevent loop, so every stream of the worker waits (loop lag, and the
TTFT of requests whose first token lands meanwhile). A prompt is a function of its request index alone, so it can
be built anywhere and early: `AheadPrompts` builds them in a small native thread pool (the tokenizer releases the
GIL: `TokenCounter.releases_gil`), the next ones while the current requests run, and `get(index)` hands over the
ready one (or waits for it, yielding to the loop). Same index, same prompt: the base source's `get` is what runs.
"""

from __future__ import annotations

import os
import sys
from collections import OrderedDict, deque
from typing import Any, Protocol

from vllm_users.workload.prompts import Prompt

__all__ = ["AHEAD", "AheadPrompts", "ahead", "off_loop_possible"]

AHEAD = 32  # prompts built ahead per source: a worker's next wave of requests (its users' next tickets)
# build threads per process; the tokenizer runs without the GIL
_THREADS = max(1, min(4, os.cpu_count() or 1))


class _Base(Protocol):
    def get(self, index: int) -> Prompt: ...


def off_loop_possible() -> bool:
    """Whether this process runs a monkey-patched gevent loop (a Locust worker): only then does a build on
    another thread free the loop; elsewhere (the preflight, a script, a test) prompts are built in line."""
    monkey = sys.modules.get("gevent.monkey")
    return bool(monkey is not None and monkey.is_module_patched("socket"))


class AheadPrompts:
    """A prompt source whose prompts are built on a thread pool, `ahead` of the indices asked so far.

    The next indices are guessed from the recent ones (a worker's tickets advance by a fixed stride: its share
    of a budget, a granted range, its arrivals); a wrong guess costs a build, never a wrong prompt. A prompt
    asked for and not built yet goes first in the queue. `off_loop=False` (or outside a gevent worker)
    builds in line, as the base source would."""

    def __init__(self, base: _Base, ahead: int = AHEAD, off_loop: bool | None = None) -> None:
        self.base = base
        self.ahead = max(0, ahead)
        self.off_loop = off_loop_possible() if off_loop is None else off_loop
        # index built ahead (not asked for yet) -> its AsyncResult
        self._slots: OrderedDict[int, Any] = OrderedDict()
        self._pending: deque[tuple[int, Any]] = deque()  # builds not started: (index, AsyncResult)
        self._wake: Any = None  # a gevent Event: work for the feeders
        self._last: int | None = None
        self._diffs: deque[int] = deque(maxlen=8)
        self._stride = 0
        self._next = 0  # the next index to build ahead (with _stride)

    def get(self, index: int) -> Prompt:
        """Prompt `index`: the one built ahead, else built now (off the loop when it can be)."""
        if not self.off_loop:
            return self.base.get(index)
        import gevent  # here: off_loop means a gevent worker, where it is loaded already

        if gevent.getcurrent() is gevent.get_hub():  # the hub cannot wait on itself
            return self.base.get(index)
        slot = self._slots.pop(index, None)
        if slot is None:
            slot = self._queue(index, urgent=True)
        self._plan(index)
        return slot.get()  # type: ignore[no-any-return]  # waits on this greenlet only; the loop runs on

    def _plan(self, index: int) -> None:
        """Learn the stride (the least step between recent indices: a granted range steps by 1 and jumps between
        grants); keep `ahead` builds queued past the highest index asked."""
        if self._last is not None and index < self._last - 4 * self.ahead * max(self._stride, 1):
            self._last, self._stride = None, 0  # far below: a new run's indices (the web UI's next test)
            self._diffs.clear()
        if self._last is not None and index > self._last:
            self._diffs.append(index - self._last)
            stride = min(self._diffs)
            if stride != self._stride:
                self._stride, self._next = stride, index + stride
        self._last = index if self._last is None else max(self._last, index)
        if self._stride <= 0 or not self.ahead:
            return
        self._next = max(self._next, self._last + self._stride)
        while self._next <= self._last + self.ahead * self._stride:
            i, self._next = self._next, self._next + self._stride
            if i not in self._slots:
                self._slots[i] = self._queue(i, urgent=False)
        # guesses nobody asked for (the stride changed): the oldest go
        while len(self._slots) > 4 * self.ahead:
            _, stale = self._slots.popitem(last=False)
            if not stale.ready():
                stale.set(None)  # its build is skipped

    def _queue(self, index: int, urgent: bool) -> Any:
        """A build of `index` for the feeders (first in line when `urgent`): its AsyncResult."""
        from gevent.event import AsyncResult, Event

        if self._wake is None:
            self._wake = Event()
            pool = _pool()
            for _ in range(pool.maxsize):  # one feeder a thread: spawn() never waits for a free one
                _spawn_feeder(self, pool)
        slot = AsyncResult()
        (self._pending.appendleft if urgent else self._pending.append)((index, slot))
        self._wake.set()
        return slot

    def _feed(self, pool: Any) -> None:
        """A feeder greenlet: builds queued prompts on `pool`'s threads, one at a time, forever."""
        while True:
            while not self._pending:
                self._wake.clear()
                self._wake.wait()
            index, slot = self._pending.popleft()
            if slot.ready():  # dropped meanwhile
                continue
            try:
                slot.set(pool.apply(self.base.get, (index,)))
            except Exception as e:  # noqa: BLE001 - the asking greenlet gets it, as in line
                slot.set_exception(e)


_POOL: Any = None


def _pool() -> Any:
    """The process's build threads (its own pool: gevent's hub pool resolves host names for connects)."""
    global _POOL
    if _POOL is None:
        from gevent.threadpool import ThreadPool

        _POOL = ThreadPool(_THREADS)
    return _POOL


def _spawn_feeder(src: AheadPrompts, pool: Any) -> None:
    import gevent

    gevent.spawn(src._feed, pool)


def ahead(base: Any, releases_gil: bool) -> Any:
    """`base` wrapped in AheadPrompts when a build on another thread frees the loop (a tokenizer that releases
    the GIL, in a gevent worker); else `base` itself."""
    if releases_gil and off_loop_possible():
        return AheadPrompts(base)
    return base
