"""The trainer yields the CPU while the chat generates (clawdesk/learn/pause.py).

Real processes and real signals: a stand-in for the trainer (a Python loop) is stopped and continued,
and its state is read from ``/proc`` (``T`` = stopped), not from our bookkeeping. The thread budget
is the engine's real :class:`ThreadBudget`. Linux only (elsewhere nothing is ever paused).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from clawdesk.engine.gate import ChatGate
from clawdesk.engine.threads import ThreadBudget
from clawdesk.learn.pause import TrainerPause, pausing_supported

pytestmark = pytest.mark.skipif(not pausing_supported(), reason="the trainer is paused only on Linux")

LOOP = "import time\nwhile True:\n    time.sleep(0.005)\n"


def _state(pid: int) -> str:
    """The process state letter from /proc (R/S running or sleeping, T stopped, Z zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "gone"
    return stat.rsplit(")", 1)[1].split()[0]


def _wait_state(pid: int, want: set[str], timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while (state := _state(pid)) not in want and time.monotonic() < deadline:
        time.sleep(0.01)
    return state


@pytest.fixture
def proc():
    p = subprocess.Popen([sys.executable, "-c", LOOP])
    yield p
    if p.poll() is None:
        p.send_signal(18)  # SIGCONT, in case a failed test left it stopped
        p.kill()
    p.wait(10)


def test_the_chat_stops_the_trainer_and_takes_every_core_back(proc):
    budget = ThreadBudget()
    gate = ChatGate()
    pause = TrainerPause([budget])
    unlisten = gate.on_computing(pause.chat_computing)
    pause.attach(proc)
    assert budget.busy  # running beside the chat: the engine takes its share
    pause.arm()
    with gate.computing():
        assert _wait_state(proc.pid, {"T"}) == "T"
        assert not budget.busy and pause.stopped  # stopped: every core is the chat's
        with gate.computing():  # a nested span (the agent's next step) changes nothing
            assert _state(proc.pid) == "T"
        assert _state(proc.pid) == "T"
    assert _wait_state(proc.pid, {"R", "S"}) in {"R", "S"}
    assert budget.busy and not pause.stopped and pause.pauses == 1
    unlisten()
    with gate.computing():  # no listener any more
        assert _wait_state(proc.pid, {"T"}, timeout=0.3) != "T"
    pause.detach()
    assert not budget.busy


def test_an_unarmed_trainer_is_never_stopped(proc):
    """Before its first line the trainer has not set its death signal: stopping it could strand it."""
    pause = TrainerPause([ThreadBudget()])
    pause.attach(proc)
    pause.chat_computing(True)
    assert _wait_state(proc.pid, {"T"}, timeout=0.3) != "T" and pause.pauses == 0
    pause.chat_computing(False)
    pause.detach()


def _stopped_for_a_reply(proc) -> tuple[ThreadBudget, TrainerPause]:
    budget = ThreadBudget()
    pause = TrainerPause([budget])
    pause.attach(proc)
    pause.arm()
    pause.chat_computing(True)
    assert _wait_state(proc.pid, {"T"}) == "T"
    return budget, pause


def test_detach_continues_a_stopped_trainer(proc):
    """The app leaving (or the watcher seeing the end) never leaves the process stopped."""
    budget, pause = _stopped_for_a_reply(proc)
    pause.detach()
    assert _wait_state(proc.pid, {"R", "S"}) in {"R", "S"} and not budget.busy
    pause.chat_computing(False)  # the reply ends after the detach: nothing to continue, budget unchanged
    assert not budget.busy


def test_a_trainer_that_ends_while_stopped_frees_the_cores(proc):
    budget, pause = _stopped_for_a_reply(proc)
    proc.kill()  # SIGKILL ends a stopped process too
    proc.wait(10)
    pause.chat_computing(False)  # no signal to a reaped pid; the budget is cleared, not set busy
    assert not budget.busy and not pause.stopped
    pause.detach()
    assert not budget.busy


CHILD = """
import os, sys, time
from clawdesk.learn.pause import continue_if_parent_dies
ok = continue_if_parent_dies()
print(ok, flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.01)
"""

PARENT = """
import os, signal, subprocess, sys, time
child = subprocess.Popen(  # stderr not inherited: the test's capture pipe must close when we exit
    [sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
)
ok = child.stdout.readline().strip()
os.kill(child.pid, signal.SIGSTOP)
while open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
    time.sleep(0.01)
print(child.pid, ok, flush=True)
os._exit(0)  # the app dies (no cleanup) while its trainer is stopped
"""


def test_a_trainer_stopped_by_an_app_that_dies_is_continued_by_the_kernel(tmp_path):
    release = tmp_path / "release"
    out = subprocess.run(
        [sys.executable, "-c", PARENT, CHILD, str(release)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    pid_text, ok = out.stdout.split()
    pid = int(pid_text)
    try:
        assert ok == "True"  # the death signal was set
        assert _wait_state(pid, {"R", "S", "gone"}) in {"R", "S"}  # running again, not stranded
    finally:
        release.touch()  # the orphan ends by itself


def test_the_learning_loop_stops_the_trainer_while_the_chat_generates(config, store, engine, monkeypatch, tmp_path):
    from clawdesk.loop import TrainingFailed, TrainingFinished, TrainingProgress
    from tests.support.loop import loop_with_a_ready_sample, stand_in_trainer, wait_for

    release = tmp_path / "release"
    pid_file = stand_in_trainer(monkeypatch, release, first={"phase": "starting", "pausable": True})
    gate = ChatGate()
    loop = loop_with_a_ready_sample(config, engine, gate)
    events: list = []
    loop.subscribe(events.append)
    try:
        assert loop.train_now()
        # The loop arms the pause before it reports the first line.
        wait_for(lambda: any(isinstance(e, TrainingProgress) for e in events), "the stand-in's first line", 30)
        pid = int(pid_file.read_text())
        with gate.computing():
            assert _wait_state(pid, {"T"}) == "T"
        assert _wait_state(pid, {"R", "S"}) in {"R", "S"}
        release.touch()
        wait_for(lambda: any(isinstance(e, TrainingFinished) for e in events), "the trainer to end")
    finally:
        loop.close()
    assert not engine.threads.busy
    assert not loop.state.running
    assert not any(isinstance(e, TrainingFailed) for e in events), events


def test_a_trainer_whose_first_line_says_not_pausable_is_never_stopped(config, store, engine, monkeypatch, tmp_path):
    """``pausable: false``: the trainer could not set its death signal, so stopping it could strand it."""
    from clawdesk.loop.events import TrainingFailed, TrainingFinished, TrainingProgress
    from tests.support.loop import loop_with_a_ready_sample, stand_in_trainer, wait_for

    release = tmp_path / "release"
    pid_file = stand_in_trainer(monkeypatch, release, first={"phase": "starting", "pausable": False})
    gate = ChatGate()
    loop = loop_with_a_ready_sample(config, engine, gate)
    events: list = []
    loop.subscribe(events.append)
    try:
        assert loop.train_now()
        wait_for(lambda: any(isinstance(e, TrainingProgress) for e in events), "the stand-in's first line", 30)
        pid = int(pid_file.read_text())
        with gate.computing():
            assert _wait_state(pid, {"T"}, timeout=0.5) != "T"
            assert not loop.pause.stopped
        assert loop.pause.pauses == 0
        release.touch()
        wait_for(lambda: any(isinstance(e, TrainingFinished) for e in events), "the trainer to end")
    finally:
        loop.close()
    assert not loop.state.running
    assert not any(isinstance(e, TrainingFailed) for e in events), events
