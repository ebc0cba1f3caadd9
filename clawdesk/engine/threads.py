"""How many CPU threads the engine's llama.cpp context may use: every core when nothing else computes, fewer when busy.

:class:`ThreadBudget` holds the "busy" flags (the trainer process running, a judge on another
engine computing) and reads other programs' CPU use (:mod:`clawdesk.engine.cpu_load`);
:class:`~clawdesk.engine.llama.Engine` calls :meth:`ThreadBudget.apply` before each native call,
so a change takes effect between prompt chunks and tokens.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

from clawdesk.engine.cpu_load import OtherLoad


def all_threads() -> int:
    """Every core this process may run on (its CPU affinity: taskset and containers narrow it)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)  # no affinity API (macOS, Windows)


def default_threads() -> int:
    # Half the cores, the engine's share while the learner runs: on small machines the trainer
    # needs cores of its own, and llama.cpp's throughput collapses when its threads compete
    # with other busy threads (see FIELD-NOTES).
    return max(1, all_threads() // 2)


class ThreadBudget:
    """How many threads one engine's llama.cpp context may use now.

    "Busy" means other work computes on the CPU *at the same time as* this engine could: the
    trainer process while it runs and is not stopped (the app stops it while the chat generates,
    :mod:`clawdesk.learn.pause`, so a reply gets every core; in between, judge work on this engine
    drops to :func:`default_threads`), and a judge running on a *different* engine (``judge.model``) while
    it is inside a native call (the ChatGate stops it at its next token or prompt chunk once the
    chat starts, so that overlap is short, but during it both would fight for every core). A judge
    on this same engine is not "busy": it runs on this very context under ``Engine.lock``, so it
    and the chat never compute at once, and while it judges it is the only work, so it too gets
    every core. With nothing busy (always for ``clawdesk ask``) the engine uses every core.

    Other programs are busy too when ``load`` says so: every whole core they keep busy is one
    thread fewer (at least one thread stays). While the engine holds every core a competitor shows
    only its share of the core it fights for, so its arrival is seen at about half a core, and once
    the engine has stepped aside it shows its full use, so the count holds steady until it stops.

    ``fixed`` (the user's ``model.n_threads``; 0 = automatic) is never changed. Flags are set from
    any thread without waiting for the engine lock; the engine applies them before its next
    native call (between prompt chunks and tokens). ``load=None`` leaves other programs out.
    """

    def __init__(self, fixed: int = 0, load: OtherLoad | None = None) -> None:
        self.fixed = fixed
        self.load = load
        self._lock = threading.Lock()
        self._busy: dict[str, int] = {}  # reason -> how many holders (two judges may share a policy)
        if load is not None:
            load.cores()  # the first sample: the window up to the first reply starts now

    @classmethod
    def for_app(cls, n_threads: int) -> ThreadBudget:
        """The app's budget for ``model.n_threads``: fixed, or automatic with other programs measured."""
        return cls(fixed=n_threads, load=None if n_threads else OtherLoad())

    def set_busy(self, reason: str, busy: bool) -> None:
        with self._lock:
            n = self._busy.get(reason, 0) + (1 if busy else -1)
            if n > 0:
                self._busy[reason] = n
            else:
                self._busy.pop(reason, None)

    @contextlib.contextmanager
    def busy_while(self, reason: str) -> Iterator[None]:
        self.set_busy(reason, True)
        try:
            yield
        finally:
            self.set_busy(reason, False)

    @property
    def busy(self) -> bool:
        with self._lock:
            return bool(self._busy)

    def wanted(self) -> int | None:
        """The thread count to use now; None when the user fixed it (leave the context as loaded)."""
        if self.fixed:
            return None
        cores = all_threads()  # one affinity call per native call, not two
        n = default_threads() if self.busy else cores
        if self.load is not None:
            n = min(n, cores - self.load.busy_cores())
        return max(1, n)

    def apply(self, llm) -> None:
        """Give ``llm``'s (a ``llama_cpp.Llama``) context the count wanted now; call under the engine lock
        before native work."""
        n = self.wanted()
        if n is None or (llm.n_threads == n and llm.n_threads_batch == n):
            return
        llm._ctx.set_n_threads(n, n)  # takes effect at the next llama_decode
        # Keep llama-cpp-python's own record in step (its pickled state and repr read these).
        llm.n_threads = llm.n_threads_batch = n
        llm.context_params.n_threads = llm.context_params.n_threads_batch = n
