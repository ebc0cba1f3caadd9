"""The trainer process yields the CPU while the chat generates: both sides of that contract.

Measured on the 2-core dev VM (``python bench/run.py --only chat``, ``ttft_training_ratio``): with
the trainer niced and the chat on half the cores, time to first token was 1.7–2.0× idle; nicer
still (19) with every core for the chat it got worse (1.9×: llama.cpp's threads wait at barriers
for the one the trainer pre-empts). A training step is minutes of compute that nobody waits for,
a reply is seconds that someone does: so while the chat generates, the app stops the trainer
(SIGSTOP) and gives the engine every core, and continues it (SIGCONT) when the reply is done.

Why this cannot strand a trainer or the chat:

- The pause spans only ``Engine.generate`` for the chat (:meth:`ChatGate.computing`), never a
  database write of the chat, so a trainer stopped inside its own short write transaction delays
  nothing the chat waits on (the judge's next write waits at most until the reply ends).
- The trainer asks the kernel to continue it when the app dies (``PR_SET_PDEATHSIG`` = SIGCONT,
  Linux), before its first progress line; the app pauses it only after that line
  (:meth:`TrainerPause.arm`), so a crash of the app mid-reply leaves a trainer that finishes its
  step, as it does when the app exits normally. Elsewhere (macOS, Windows) nothing is paused.
- Every transition goes through one lock, so a trainer that ends while paused never leaves the
  engine on half its cores.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the trainer process imports this module too: no llama.cpp there
    from clawdesk.engine.threads import ThreadBudget

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
BUSY_REASON = "trainer"  # the ThreadBudget reason while the trainer computes beside the chat


def pausing_supported() -> bool:
    """Only where the trainer can make the kernel continue it if the app dies (Linux)."""
    return sys.platform.startswith("linux") and hasattr(signal, "SIGSTOP")


def continue_if_parent_dies() -> bool:
    """In the trainer process: have the kernel send SIGCONT when the app that started it dies.

    Returns True when set (the app may pause this process from now on). The death signal follows
    the *thread* that started the process; the app starts trainers from its UI (main) thread.
    """
    if not pausing_supported():
        return False
    parent = os.getppid()
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGCONT), 0, 0, 0) != 0:
        return False
    # The app may have died before prctl (this process was re-parented): nobody will pause it then.
    return os.getppid() == parent


class TrainerPause:
    """The app's side: who owns the CPU while one trainer process runs (one lock, one state).

    ``attach`` when the process starts (engines drop to their share of the cores), ``arm`` once its
    first progress line arrived (it set its death signal), ``chat_computing`` from the chat gate,
    ``detach`` when it ended (or before the app leaves it running on exit).
    """

    def __init__(self, budgets: Iterable[ThreadBudget]) -> None:
        self._budgets = {id(b): b for b in budgets}.values()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._armed = False
        self._chat = False  # the chat is generating
        self._stopped = False  # we sent SIGSTOP and no SIGCONT yet
        self._cores_busy = False  # what the thread budgets were last told
        self.pauses = 0  # how many times the trainer was stopped for a reply (for the bench and tests)

    def attach(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._proc, self._armed, self._stopped = proc, False, False
            self._apply()

    def arm(self) -> None:
        """The trainer reported progress, so it has set its death signal: it may be paused now."""
        with self._lock:
            self._armed = pausing_supported()
            self._apply()

    def detach(self) -> None:
        """The trainer ended, or the app is leaving it to finish alone: never leave it stopped."""
        with self._lock:
            self._armed = False
            self._apply()
            self._proc = None
            self._apply()

    def chat_computing(self, on: bool) -> None:
        """Listener for :meth:`ChatGate.on_computing`: runs in the chat's thread before prefill."""
        with self._lock:
            self._chat = on
            self._apply()

    @property
    def stopped(self) -> bool:
        with self._lock:
            return self._stopped

    def _apply(self) -> None:
        proc = self._proc
        alive = proc is not None and proc.poll() is None
        want_stop = alive and self._armed and self._chat
        if want_stop != self._stopped:
            # A process that ended needs no SIGCONT (and its pid may already belong to another).
            if alive and self._signal(proc, signal.SIGSTOP if want_stop else signal.SIGCONT):
                self.pauses += want_stop
            self._stopped = want_stop
        # The trainer computes beside the chat only while it runs and is not stopped.
        cores_busy = alive and not self._stopped
        if cores_busy != self._cores_busy:
            for budget in self._budgets:
                budget.set_busy(BUSY_REASON, cores_busy)
            self._cores_busy = cores_busy

    @staticmethod
    def _signal(proc: subprocess.Popen, sig: int) -> bool:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            return False  # it ended (and was reaped) between poll() and here: nothing to stop or continue
        return True
