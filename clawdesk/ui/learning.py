"""The chat's learning loop: background judging, automatic training, hot-swapping new adapters.

:class:`LearningController` belongs to the app and runs on its UI thread; the blocking work runs
in Textual thread workers that report back only through ``app.call_from_thread``:

- the judge loop (:class:`~clawdesk.judge.service.JudgeLoop`) shares the engine and yields to the
  chat through the chat service's :class:`~clawdesk.engine.gate.ChatGate`;
- when learning is ON and a full batch of judged samples is ready, the trainer runs as a separate,
  low-priority process (``python -m clawdesk.learn.trainer``), one optimizer step per launch,
  printing JSON progress lines; a new ready version is hot-swapped in between two replies. While
  it runs the engine keeps to its share of the cores, otherwise it uses them all.

Turning learning OFF interrupts judging at the next token and launches no new training step; a
step already running finishes and is kept.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clawdesk.errors import ClawDeskError
from clawdesk.judge.runner import Judge
from clawdesk.judge.service import JudgeEvent, JudgeLoop
from clawdesk.learn.pause import TrainerPause
from clawdesk.reload import AdapterSwitch
from clawdesk.ui.learning_screens import LearnedScreen, LearningScreen

if TYPE_CHECKING:
    from clawdesk.ui.app import ClawDeskApp


@dataclass
class TrainingState:
    """What the learning screen shows."""

    running: bool = False
    phase: str = ""
    step: int = 0
    steps: int = 0
    message: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    ready_samples: int = 0
    batch_size: int = 16
    judge_ready: int = 0
    judge_waiting: int = 0
    judging: str = ""  # e.g. "turn 12: vote 3/6"


class LearningController:
    """Owns the judge worker and the trainer process for one running app."""

    def __init__(self, app: ClawDeskApp, *, judge: Judge | None = None, auto_train: bool = True):
        self.app = app
        self.config = app.config
        self.engine = app.engine
        self.judge = judge or Judge(app.engine, app.config.judge, gate=app.service.gate)
        self.loop = JudgeLoop(
            self.judge,
            app.config.db_path,
            max_age_hours=app.config.judge.pending_max_age_hours,
            on_event=lambda ev: self._from_thread(self._judge_event, ev),
        )
        self.auto_train = auto_train
        self.state = TrainingState(batch_size=app.config.train.batch_size)
        self._proc: subprocess.Popen | None = None
        # While the trainer runs every engine of this app (the served one, and the judge's when
        # judge.model is another GGUF) drops to its share of the cores, and while the chat
        # generates the trainer is stopped instead (clawdesk.learn.pause).
        self.pause = TrainerPause(e.threads for e in (self.engine, self.judge.engine))
        self._unlisten = self.judge.gate.on_computing(self.pause.chat_computing)  # the chat's gate
        self._versions_before = 0
        self.listeners: list[Callable[[TrainingState], None]] = []  # e.g. the learning screen

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        problem = AdapterSwitch(self.engine, self.app.store).sync()  # before any reply or judge runs
        if problem:
            self.app.notify(problem, severity="warning", timeout=8)
        self.loop.set_learning(self.app.store.learning_enabled)
        self.app.run_worker(self.loop.run, thread=True, group="judge", name="judge", exit_on_error=False)
        self.refresh()

    def close(self) -> None:
        self.loop.close()
        self._unlisten()
        # A training step in flight finishes in its own process and is kept on disk: never stopped.
        self.pause.detach()

    def _from_thread(self, fn: Callable[..., Any], *args: Any) -> None:
        # RuntimeError: the app has already exited, so there is no screen left to update.
        with contextlib.suppress(RuntimeError):
            self.app.call_from_thread(fn, *args)

    # -- events ---------------------------------------------------------------------------

    def turn_recorded(self) -> None:
        self.loop.wake()
        self.refresh()

    def set_learning(self, on: bool) -> None:
        self.loop.set_learning(on)
        self.refresh()
        if on:
            self.maybe_train()

    def _judge_event(self, ev: JudgeEvent) -> None:
        if ev.kind == "vote" and ev.vote is not None:
            self.state.judging = f"turn {ev.vote.turn_id}: vote {ev.vote.done}/{ev.vote.total}"
        else:
            self.state.judging = ""
            self.state.judge_ready, self.state.judge_waiting = ev.ready, ev.waiting
        if ev.kind == "judged":
            self.refresh()
            self.maybe_train()
        else:
            self._publish()

    def refresh(self) -> None:
        """Re-read counts from the DB (UI thread store) and update the status bar."""
        from clawdesk.learn.samples import count_ready
        from clawdesk.store.judgments import backlog

        store = self.app.store
        self.state.judge_ready, self.state.judge_waiting = backlog(store)
        self.state.ready_samples = count_ready(
            store, self.engine.identity.sha256, step_reward=self.config.train.step_reward
        )
        self._publish()

    def _publish(self) -> None:
        s = self.state
        bar = self.app.status_bar
        if not self.app.store.learning_enabled:
            bar.remove_field("judge")
            bar.remove_field("learn")
        else:
            judge = (s.judging and f"judging {s.judging}") or (
                f"judge {s.judge_ready}" + (f" (+{s.judge_waiting} waiting)" if s.judge_waiting else "")
            )
            bar.set_field("judge", judge)
            if s.running:
                bar.set_field("learn", f"training {s.phase} {s.step}/{s.steps or '?'}", style="bold")
            else:
                bar.set_field("learn", f"batch {min(s.ready_samples, s.batch_size)}/{s.batch_size}")
        for listener in list(self.listeners):
            listener(s)

    # -- training -------------------------------------------------------------------------

    def maybe_train(self, *, force: bool = False) -> bool:
        """Start one training step when learning is ON and a full batch is ready (or ``force``)."""
        if self._proc is not None or not self.app.store.learning_enabled:
            return False
        if not force and (not self.auto_train or self.state.ready_samples < self.state.batch_size):
            return False
        if self.state.ready_samples == 0:
            self.app.notify("No judged turns to learn from yet.", timeout=4)
            return False
        ident = self.engine.identity
        cmd = [
            sys.executable, "-m", "clawdesk.learn.trainer",
            "--db", str(self.config.db_path), "--adapters", str(self.config.adapters_dir),
            "--base", str(ident.path), "--base-name", ident.name, "--base-sha", ident.sha256,
            "--steps", "1", "--config-home", str(self.config.home),
        ]  # fmt: skip
        # The batch size is always explicit, so the process trains on exactly what this app counted.
        batch = min(self.state.ready_samples, self.state.batch_size) if force else self.state.batch_size
        cmd += ["--batch-size", str(batch)]
        from clawdesk.learn.versions import list_versions

        self._versions_before = max((v.version for v in list_versions(self.app.store)), default=0)
        from clawdesk.private import open_private, private_dir

        # The trainer's stderr can quote turns (errors, warnings): owner-only, like the log itself.
        log = open_private(private_dir(self.config.logs_dir) / "trainer.log", "a")
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1)
        log.close()
        self.pause.attach(self._proc)
        self.state.running, self.state.phase, self.state.message = True, "starting", "starting the trainer"
        self._publish()
        self.app.run_worker(self._watch_trainer, thread=True, group="trainer", name="trainer", exit_on_error=False)
        return True

    def _watch_trainer(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        last: dict[str, Any] = {}
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # a stray print from a library; the log has stderr
            if event.get("pausable"):
                self.pause.arm()  # its death signal is set: the chat may stop it from now on
            last = event
            self._from_thread(self._train_event, event)
        code = proc.wait()
        # Here, not in _train_finished: the cores are free now, even if the app is already gone.
        self.pause.detach()
        self._from_thread(self._train_finished, code, last)

    def _train_event(self, event: dict[str, Any]) -> None:
        s = self.state
        s.phase = event.get("phase", s.phase)
        s.step, s.steps = int(event.get("step", s.step)), int(event.get("steps", s.steps))
        s.message = event.get("message", "") or event.get("error", "")
        if event.get("metrics"):
            s.metrics = event["metrics"]
        self._publish()

    def _train_finished(self, code: int, last: dict[str, Any]) -> None:
        from clawdesk.learn.versions import list_versions

        self._proc = None
        self.state.running = False
        versions = [v.version for v in list_versions(self.app.store) if v.version > self._versions_before]
        if code != 0:
            self.app.notify(f"Training failed: {last.get('error') or 'see logs/trainer.log'}", severity="error")
        elif versions:
            self._activate_newest(versions)
        elif last.get("message"):
            self.app.notify(last["message"], timeout=6)
        self.refresh()
        if versions:
            self.maybe_train()  # more full batches may be waiting

    def _activate_newest(self, versions: list[int]) -> None:
        from clawdesk.learn.versions import get_version

        rows = [get_version(self.app.store, n) for n in versions]
        for r in rows:
            if r.status == "rejected":
                self.app.notify(
                    f"Adapter v{r.version} was rejected: {r.note}. The chat keeps its current adapter.",
                    severity="warning",
                )
        ready = [r for r in rows if r.status == "ready"]
        if ready:
            newest = ready[-1]
            self.swap("activate", newest.version, done=f"Learned adapter v{newest.version} from "
                      f"{newest.n_samples} turn(s); now serving it.")  # fmt: skip

    def swap(self, action: str, n: int | None = None, *, done: str = "") -> None:
        """Activate / roll back / turn off the adapter without blocking the UI.

        The swap waits for the engine lock, so it runs in a worker: a reply in progress finishes
        on the old adapter, and the UI keeps responding meanwhile.
        """

        def work() -> None:
            from clawdesk.store import Store

            store = Store.open(self.config.db_path)  # this thread's own connection
            try:
                switch = AdapterSwitch(self.engine, store)
                result = switch.rollback() if action == "rollback" else switch.activate(n)
            except ClawDeskError as err:
                self._from_thread(self.app.notify, str(err), severity="error")
                return
            finally:
                store.close()
            if action == "rollback":
                message = f"Rolled back to v{result}." if result is not None else "Serving the base model."
            else:
                message = done or (f"Now serving adapter v{n}." if n is not None else "Serving the base model.")
            self._from_thread(self._swapped, message)

        self.app.run_worker(work, thread=True, group="swap", name="swap", exit_on_error=False)

    def _swapped(self, message: str) -> None:
        self.app.refresh_status()
        self.app.notify(message, timeout=6)
        self._publish()


class LearningActions:
    """The chat app's learning key actions (F3–F6, palette); mixed into :class:`ClawDeskApp`.

    Kept here so the app module stays about chatting; the methods use the app's ``store``,
    ``session``, ``learning`` controller, ``notify`` and ``push_screen``.
    """

    def action_rate(self, rating: int) -> None:
        """Thumbs up/down for the last reply of this chat; overrides the judge's score."""
        from clawdesk.store.judgments import last_turn_id, set_rating

        if self.session is None or self.session.n_turns == 0:
            self.notify("There is no reply to rate yet.")
            return
        try:
            turn_id = last_turn_id(self.store, self.session.id)
            set_rating(self.store, turn_id, rating)
        except ClawDeskError as err:
            self.notify(str(err), severity="error")
            return
        self.notify(("👍" if rating > 0 else "👎") + " noted for the last reply (it overrides the judge).", timeout=3)
        if self.learning is not None:
            self.learning.refresh()
            self.learning.maybe_train()

    def _need_learning(self) -> LearningController | None:
        if self.learning is None:
            self.notify("Background learning is not running in this window.", severity="warning")
        return self.learning

    def action_learned(self) -> None:
        if isinstance(self.screen, LearnedScreen):  # F5 again closes it
            self.screen.dismiss()
        elif (controller := self._need_learning()) is not None:
            self.push_screen(LearnedScreen(controller))

    def action_learning_screen(self) -> None:
        if isinstance(self.screen, LearningScreen):  # F6 again closes it
            self.screen.dismiss()
        elif (controller := self._need_learning()) is not None:
            self.push_screen(LearningScreen(controller))

    def action_train_now(self) -> None:
        if (controller := self._need_learning()) is not None and not controller.maybe_train(force=True):
            self.notify("Training did not start: learning is OFF, a step is running, or nothing is judged yet.")

    def action_rollback(self) -> None:
        if (controller := self._need_learning()) is not None:
            controller.swap("rollback")
