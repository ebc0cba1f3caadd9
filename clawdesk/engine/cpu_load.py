"""How many of this process's cores other programs keep busy, read from ``/proc/stat`` (Linux).

:class:`~clawdesk.engine.threads.ThreadBudget` asks :meth:`OtherLoad.busy_cores` before each native
call. llama.cpp's worker threads wait for each other at every graph node, so one of them losing its
core to another program stalls all of them: on a 2-core machine with one other busy process,
``n_threads=2`` decodes far slower than ``n_threads=1`` (FIELD-NOTES; ``bench/sec_contention.py``).
The app's own work (the trainer, a judge) is known by flags; this module sees everything else.

The estimate: busy time on the cores this process may run on (its CPU affinity), minus this
process's own CPU time, over the time since the last sample, in cores. Steal time (the hypervisor
running other VMs) and I/O wait are not "busy": they take no core from us that a smaller thread
count would give back. Nor is work at a lower priority (``nice`` > 0: backups, indexers, niced
builds) unless this process is niced itself: the kernel gives our threads their cores back, and
every core stays faster beside it (``bench/sec_contention.py``, medians in docs/benchmarks.md:
beside a busy loop at nice 10, 2 threads decoded 84.8 tok/s, 1 thread 68.2; beside one at nice 0,
26.7 against 57.4).
/proc/stat does not say *how* nice, so a program at nice 1–4, which competes almost as an equal,
is left out too. Where ``/proc/stat`` is missing (macOS, Windows) nothing is measured and
the estimate stays 0: the budget then follows the app's own flags only, as before.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

PROC_STAT = Path("/proc/stat")
INTERVAL_S = 0.5  # at most one /proc/stat read per half second: a few tokens apart, ~50 µs each
# A reading of other programs' use, in cores, counts as a whole busy core from this much on. While
# llama.cpp holds every core, a competitor of equal priority shows up with about half a core (the
# kernel splits the core it shares); 0.4 catches that and ignores a desktop's usual background
# (a few % per program).
WHOLE_CORE_FROM = 0.4


def read_busy_ticks(cpus: Iterable[int], stat_path: Path = PROC_STAT, *, with_nice: bool = False) -> int | None:
    """Busy clock ticks (user + system + irq + softirq, + nice if ``with_nice``) summed over ``cpus``; None if
    unreadable."""
    wanted = {f"cpu{n}" for n in cpus}
    total = 0
    found = 0
    try:
        with open(stat_path, encoding="ascii") as f:
            for line in f:
                if not line.startswith("cpu"):
                    break  # the cpu lines come first
                fields = line.split()
                if fields[0] not in wanted:
                    continue
                # user nice system idle iowait irq softirq steal ...: guest time is inside user/nice.
                user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
                total += user + system + irq + softirq + (nice if with_nice else 0)
                found += 1
    except (OSError, ValueError):
        return None
    return total if found else None


def own_cpu_seconds() -> float:
    """CPU time of every thread of this process (children excluded: a trainer process counts as other)."""
    t = os.times()
    return t.user + t.system


def niced() -> bool:
    """Whether this process runs at a lower priority than normal (then niced work is our equal)."""
    return hasattr(os, "nice") and os.nice(0) > 0


def _affinity() -> frozenset[int]:
    if hasattr(os, "sched_getaffinity"):
        return frozenset(os.sched_getaffinity(0))
    return frozenset()


class OtherLoad:
    """Other programs' CPU use on this process's cores, re-measured at most every ``interval`` seconds.

    The readers are parameters so a test can feed exact tick counts; the defaults read the real
    machine. Thread-safe: one engine thread samples, any thread may read.
    """

    def __init__(
        self,
        *,
        interval: float = INTERVAL_S,
        cpus: Iterable[int] | None = None,
        busy_ticks: Callable[[frozenset[int]], int | None] | None = None,
        own_seconds: Callable[[], float] = own_cpu_seconds,
        clock: Callable[[], float] = time.monotonic,
        ticks_per_s: float | None = None,
    ) -> None:
        self.interval = interval
        self.cpus = frozenset(cpus) if cpus is not None else _affinity()
        if busy_ticks is None:
            busy_ticks = functools.partial(read_busy_ticks, with_nice=niced())
        self._busy_ticks = busy_ticks
        self._own_seconds = own_seconds
        self._clock = clock
        self._hz = ticks_per_s or float(os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)
        self._lock = threading.Lock()
        self._last: tuple[float, int, float] | None = None  # (clock, busy ticks, own cpu s)
        self._cores = 0.0  # the latest estimate
        self._readable = True

    def cores(self) -> float:
        """Other programs' average use over the latest window, in cores (0.0 until two samples exist)."""
        now = self._clock()
        with self._lock:
            if not self._readable or (self._last is not None and now - self._last[0] < self.interval):
                return self._cores
            busy = self._busy_ticks(self.cpus) if self.cpus else None
            if busy is None:
                self._readable = False  # nothing to read here (see the module docstring): stop trying
                self._cores = 0.0
                return 0.0
            own = self._own_seconds()
            if self._last is not None:
                then, busy_then, own_then = self._last
                elapsed = now - then
                if elapsed > 0:
                    others = (busy - busy_then) / self._hz - (own - own_then)
                    self._cores = max(0.0, others / elapsed)
            self._last = (now, busy, own)
            return self._cores

    def busy_cores(self) -> int:
        """Whole cores other programs keep busy now (see :data:`WHOLE_CORE_FROM`)."""
        return math.floor(self.cores() + (1.0 - WHOLE_CORE_FROM))
