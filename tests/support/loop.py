"""A learning loop for tests: a stand-in trainer process, a log with one ready sample, a polling wait,
and a subscriber that records the loop's events.

Shared by the loop, engine-thread and trainer-pause tests.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from clawdesk.engine.gate import ChatGate
from clawdesk.judge.runner import Judge


def stand_in_trainer(monkeypatch, release: Path, *, first: dict | None = None) -> Path:
    """The loop's trainer launch runs a stand-in: it writes its pid to the returned file, prints ``first``
    (if given), waits for ``release`` to exist, then prints the last progress line and exits."""
    real_popen = subprocess.Popen
    pid_file = release.with_name(release.name + ".pid")
    stand_in = (
        "import json, os, time\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        f"if {first!r}:\n"
        f"    print(json.dumps({first!r}), flush=True)\n"
        f"while not os.path.exists({str(release)!r}):\n"
        "    time.sleep(0.01)\n"
        'print(json.dumps({"phase": "done"}), flush=True)\n'
    )
    monkeypatch.setattr(
        "clawdesk.loop.trainer_process.subprocess.Popen",
        lambda cmd, **kwargs: real_popen([sys.executable, "-c", stand_in], **kwargs),
    )
    return pid_file


def loop_with_a_ready_sample(config, engine, gate: ChatGate | None = None, **kwargs):
    """A real :class:`LearningLoop` on a log holding one judged, trainable turn of ``engine``'s model
    (``kwargs`` go to the loop, e.g. ``synchronous=True``)."""
    from clawdesk.loop import LearningLoop
    from clawdesk.testing.judged_log import fill_judged

    gate = gate or ChatGate()
    fill_judged(config.db_path, 1, seed=0, vocab=100, sha=engine.identity.sha256, rewards=(1,))
    loop = LearningLoop(config, config.db_path, engine, Judge(engine, config.judge, gate=gate), gate=gate, **kwargs)
    loop.refresh()
    assert loop.state.ready_samples == 1
    return loop


def wait_for(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


class Events:
    """A subscriber that records events with the thread they arrived on."""

    def __init__(self) -> None:
        self.seen: list[tuple[object, str]] = []
        self._cond = threading.Condition()

    def __call__(self, event) -> None:
        with self._cond:
            self.seen.append((event, threading.current_thread().name))
            self._cond.notify_all()

    def of(self, kind) -> list:
        with self._cond:
            return [e for e, _ in self.seen if isinstance(e, kind)]

    def wait(self, condition, what: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not condition():
                left = deadline - time.monotonic()
                assert left > 0, f"timed out waiting for {what}; events: {[e for e, _ in self.seen]}"
                self._cond.wait(min(left, 0.2))
