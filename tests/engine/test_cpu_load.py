"""Other programs' CPU use: the /proc/stat parser on a written file, the window arithmetic on fed
tick counts (exact), and the budget's thread count from it. The real machine is read in
test_engine_threads.py, with a real busy process."""

from __future__ import annotations

import pytest

from clawdesk.engine import threads as threads_mod
from clawdesk.engine.cpu_load import OtherLoad, read_busy_ticks
from clawdesk.engine.threads import ThreadBudget

STAT = """cpu  900 90 300 5000 70 0 20 400 0 0
cpu0 100 10 50 2000 30 0 5 100 0 0
cpu1 200 20 60 1000 20 0 6 200 0 0
cpu2 600 60 190 2000 20 0 9 100 0 0
intr 1 2 3
ctxt 99
"""


def test_busy_ticks_sum_user_system_irq_softirq_of_the_given_cores(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    # cpu0: 100+50+0+5 = 155; cpu2: 600+190+0+9 = 799; nice, idle, iowait and steal left out.
    assert read_busy_ticks({0, 2}, stat) == 155 + 799
    assert read_busy_ticks({1}, stat) == 200 + 60 + 0 + 6
    # A niced process of our own counts niced work as its equal: nice 10 + 60 added.
    assert read_busy_ticks({0, 2}, stat, with_nice=True) == 155 + 799 + 10 + 60
    assert read_busy_ticks({7}, stat) is None  # a core the file does not list
    assert read_busy_ticks({0}, tmp_path / "missing") is None


class Fed:
    """The machine's counters, set by the test."""

    def __init__(self) -> None:
        self.now = 0.0
        self.ticks = 0
        self.own = 0.0
        self.reads = 0

    def busy_ticks(self, cpus):
        self.reads += 1
        return self.ticks


def _load(fed: Fed) -> OtherLoad:
    return OtherLoad(
        interval=0.5,
        cpus={0, 1},
        busy_ticks=fed.busy_ticks,
        own_seconds=lambda: fed.own,
        clock=lambda: fed.now,
        ticks_per_s=100,
    )


def test_the_window_counts_busy_time_minus_our_own_in_cores():
    fed = Fed()
    load = _load(fed)
    assert load.cores() == 0.0  # one sample: no window yet
    fed.now, fed.ticks, fed.own = 1.0, 150, 0.5  # 1.5 core-s busy, 0.5 of it ours, over 1 s
    assert load.cores() == pytest.approx(1.0)
    assert load.busy_cores() == 1
    fed.now = 1.2  # inside the interval: the last estimate, no read
    reads = fed.reads
    fed.ticks = 10_000
    assert load.cores() == pytest.approx(1.0) and fed.reads == reads
    fed.now, fed.ticks, fed.own = 2.0, 150 + 30, 0.6  # 0.3 busy, 0.1 ours, over 1 s
    assert load.cores() == pytest.approx(0.2)
    assert load.busy_cores() == 0


@pytest.mark.parametrize(
    ("others", "whole"),
    [(0.0, 0), (0.39, 0), (0.4, 1), (1.0, 1), (1.39, 1), (1.4, 2), (2.5, 3)],
)
def test_a_busy_core_counts_from_0_4_of_a_core(others, whole):
    fed = Fed()
    load = _load(fed)
    load.cores()
    fed.now, fed.ticks = 1.0, round(others * 100)
    assert load.busy_cores() == whole


def test_our_own_time_beyond_the_counted_cores_is_not_negative_load():
    fed = Fed()
    load = _load(fed)
    load.cores()
    fed.now, fed.ticks, fed.own = 1.0, 50, 0.9  # tick rounding: we used more than the cores show
    assert load.cores() == 0.0


def test_no_proc_stat_measures_nothing_and_stops_trying():
    reads: list[int] = []
    load = OtherLoad(cpus={0}, busy_ticks=lambda cpus: reads.append(1), interval=0.0)  # returns None
    assert load.cores() == 0.0 and load.busy_cores() == 0
    assert len(reads) == 1  # one failed read, not one per token


class Busy:
    def __init__(self, cores: int) -> None:
        self.n = cores

    def cores(self) -> float:
        return float(self.n)

    def busy_cores(self) -> int:
        return self.n


@pytest.mark.parametrize(
    ("others", "flagged", "threads"),
    [(0, False, 8), (1, False, 7), (3, False, 5), (1, True, 4), (5, True, 3), (7, False, 1), (12, False, 1)],
)
def test_the_budget_leaves_other_programs_their_cores(monkeypatch, others, flagged, threads):
    monkeypatch.setattr(threads_mod, "all_threads", lambda: 8)  # default_threads() reads it too: 4
    budget = ThreadBudget(load=Busy(others))
    budget.set_busy("trainer", flagged)
    assert budget.wanted() == threads
