"""The learning loop: judge worker → sample readiness → trainer → validation → hot-swap.

:class:`LearningLoop` is built by :func:`clawdesk.runtime.build_learning_loop` and runs below every
front end: the TUI and ``clawdesk serve`` render its events, and ``clawdesk eval`` drives it. By
default its blocking work runs on threads of its own, each with its own database connection:

- the judge thread runs :class:`~clawdesk.judge.service.JudgeLoop`: it shares the engine and yields
  to the chat through the chat's :class:`~clawdesk.engine.gate.ChatGate`;
- when learning is ON and a full batch of judged samples is ready (or :meth:`train_now` asks), the
  loop's :class:`~clawdesk.loop.trainers.Trainer` starts a run and a watcher thread follows its
  :mod:`clawdesk.learn.protocol` messages. The app's trainer is a separate, low-priority process,
  one optimizer step per launch: while it runs the engines keep to their share of the cores, and
  while the chat generates it is stopped (:class:`~clawdesk.learn.pause.TrainerPause`, owned here);
- a new ready version is hot-swapped in by a swap thread: :meth:`Engine.load_adapter` waits for the
  engine lock, so a reply in progress finishes on the old adapter and the next one uses the new.

``synchronous=True`` is the mode for callers that need reproducible numbers (the eval): no judge
thread and no training on timing. The caller runs :meth:`judge_pending` and :meth:`train_ready` at
points of its choosing; each does the same work (the same judge pass, watcher, validation rows and
hot-swap, the same events) on the calling thread and returns when it is done.

Turning learning OFF interrupts judging at the next token and launches no new training step; a step
already running finishes and is kept. No event is sent while the loop's lock is held, so a
subscriber may call back into the loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from clawdesk.config import Config
from clawdesk.engine import Engine
from clawdesk.engine.gate import ChatGate
from clawdesk.errors import ClawDeskError
from clawdesk.judge.service import BacklogJudge, JudgeEvent, JudgeLoop
from clawdesk.learn.pause import TrainerPause
from clawdesk.learn.protocol import TrainerFailed, TrainerMessage, TrainerStarted, TrainProgress
from clawdesk.loop.events import (
    JudgeProgress,
    JudgeStopped,
    LearningToggled,
    LoopEvent,
    LoopState,
    PreferenceNoted,
    SamplesReady,
    ServingProblem,
    SwapFailed,
    TrainingFailed,
    TrainingFinished,
    TrainingProgress,
    TrainingSkipped,
    TrainingStarted,
    VersionRejected,
    VersionServed,
)
from clawdesk.loop.trainers import ProcessTrainer, Trainer, TrainerRun
from clawdesk.preferences import HintClassifier
from clawdesk.reload import AdapterSwitch
from clawdesk.store import Store

NOTHING_JUDGED = "No judged turns to learn from yet."

Listener = Callable[[LoopEvent], None]


class LearningLoop:
    """Background judging, automatic training and hot-swapping for one served engine."""

    def __init__(
        self,
        config: Config,
        db_path: Path,
        engine: Engine,
        judge: BacklogJudge,
        *,
        gate: ChatGate,
        auto_train: bool = True,
        idle_poll: float = 2.0,
        classify: HintClassifier | None = None,
        trainer: Trainer | None = None,
        synchronous: bool = False,
    ) -> None:
        """``auto_train=False`` trains only on :meth:`train_now`; ``gate`` is the chat service's.
        ``classify``: the judge's standing-vs-one-off call; with it, standing hints become preference
        items (:class:`~clawdesk.loop.events.PreferenceNoted`); None: the memory is never added to.
        ``trainer``: how a training run is made (default :class:`~clawdesk.loop.trainers.ProcessTrainer`).
        ``synchronous``: judge and train only on :meth:`judge_pending` / :meth:`train_ready`, on the
        caller's thread (``auto_train`` is then off)."""
        self.config = config
        self.db_path = Path(db_path)
        self.engine = engine
        self.judge = judge
        self.gate = gate
        self.synchronous = synchronous
        self.auto_train = auto_train and not synchronous
        self.trainer: Trainer = trainer or ProcessTrainer()
        self._lock = threading.RLock()
        self._state = LoopState(batch_size=config.train.batch_size, serving=engine.adapter_version)
        self._listeners: list[Listener] = []
        self._judges = JudgeLoop(
            judge, self.db_path, max_age_hours=config.judge.pending_max_age_hours, on_event=self._judge_event,
            idle_poll=idle_poll, classify=classify,
        )  # fmt: skip
        # While the trainer runs every engine of the loop (the served one, and the judge's when
        # judge.model is another GGUF) drops to its share of the cores, and while the chat
        # generates the trainer is stopped instead (clawdesk.learn.pause).
        self.pause = TrainerPause(e.threads for e in (engine, judge.engine))
        self._unlisten = gate.on_computing(self.pause.chat_computing)
        self._trainer: TrainerRun | None = None
        self._versions_before = 0
        self._judge_thread: threading.Thread | None = None
        self._closed = False

    # -- subscribers and state ------------------------------------------------------------

    def subscribe(self, callback: Listener) -> Callable[[], None]:
        """Call ``callback(event)`` for every event from now on; returns the function that stops it."""
        with self._lock:
            self._listeners.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._listeners:
                    self._listeners.remove(callback)

        return unsubscribe

    @property
    def state(self) -> LoopState:
        """What the loop is doing now (a frozen snapshot)."""
        with self._lock:
            return self._state

    def serving(self) -> str:
        """The adapter the engine serves now: ``"v3"``, or ``"base"`` for the base model."""
        n = self.engine.adapter_version
        return "base" if n is None else f"v{n}"

    def _update(self, **changes) -> LoopState:
        with self._lock:
            self._state = dataclasses.replace(self._state, **changes)
            return self._state

    def _emit(self, event: LoopEvent) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:  # outside the lock: a listener may wait for another thread
            listener(event)

    @contextlib.contextmanager
    def _store(self) -> Iterator[Store]:
        """A connection of the calling thread's own (SQLite connections stay on their thread)."""
        store = Store.open(self.db_path)
        try:
            yield store
        finally:
            store.close()

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        if self.synchronous:  # the caller's thread does the work and gets control back when it is done
            target()
            return
        # Not daemons: an exiting process lets the judge stop at its next token and reads a running
        # trainer's last lines, as the app's thread workers did.
        threading.Thread(target=target, name=f"clawdesk-{name}").start()

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Serve the chosen adapter (before any reply or judge runs), then start judging (in synchronous
        mode: judging waits for :meth:`judge_pending`)."""
        with self._store() as store:
            problem = AdapterSwitch(self.engine, store).sync()
            learning = store.learning_enabled
        self._update(learning=learning, serving=self.engine.adapter_version)
        if problem:
            self._emit(ServingProblem(problem))
        self._judges.set_learning(learning)
        if not self.synchronous:
            self._judge_thread = threading.Thread(target=self._run_judge, name="clawdesk-judge")
            self._judge_thread.start()
        self.refresh()

    def close(self) -> None:
        """Stop judging and sending events; a training step in flight finishes in its own process and is kept."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._listeners.clear()
        self._judges.close()
        self._unlisten()
        self.pause.detach()
        if self._judge_thread is None:
            self._close_judge_engine()

    def _run_judge(self) -> None:
        try:
            self._judges.run()
        except ClawDeskError as err:
            self._emit(JudgeStopped(str(err)))
        finally:
            if self._closed:
                self._close_judge_engine()

    def _close_judge_engine(self) -> None:
        # The judge's own engine (judge.model) belongs to the loop; the served one to its caller.
        if self.judge.engine is not self.engine:
            self.judge.engine.close()

    # -- what happened --------------------------------------------------------------------

    def turn_recorded(self) -> None:
        """A turn was recorded: look at the judge's backlog now and count again."""
        self._judges.wake()
        self.refresh()

    def set_learning(self, on: bool) -> None:
        """The learning switch changed (the caller persisted it: ``Store.set_learning``)."""
        self._judges.set_learning(on)
        self._update(learning=on)
        self._emit(LearningToggled(on))
        self.refresh()
        if on:
            self._maybe_train()

    def feedback_changed(self) -> None:
        """A thumb changed which samples are ready: count again and train when a batch is full."""
        self.refresh()
        self._maybe_train()

    def refresh(self) -> None:
        """Read the judge's backlog and the ready samples again (on the calling thread's own connection)."""
        from clawdesk.learn.samples import count_ready
        from clawdesk.store.judgments import backlog

        with self._store() as store:
            ready, waiting = backlog(store)
            samples = count_ready(store, self.engine.identity.sha256, step_reward=self.config.train.step_reward)
            learning = store.learning_enabled
        state = self._update(judge_ready=ready, judge_waiting=waiting, ready_samples=samples, learning=learning)
        self._emit(SamplesReady(samples, state.batch_size))

    def _judge_event(self, ev: JudgeEvent) -> None:
        """From the judge thread."""
        if ev.kind == "vote" and ev.vote is not None:
            state = self._update(judging=f"turn {ev.vote.turn_id}: vote {ev.vote.done}/{ev.vote.total}")
        else:
            state = self._update(judging="", judge_ready=ev.ready, judge_waiting=ev.waiting)
        # First the judge's own counts (a front end shows them at once), then the samples read again.
        self._emit(JudgeProgress(state.judging, state.judge_ready, state.judge_waiting))
        if ev.preference is not None:
            noted = ev.preference
            replaced = tuple(p.id for p in noted.replaced)
            self._emit(PreferenceNoted(noted.item.id, noted.item.text, noted.item.source_turn_id, noted.kind, replaced))
        if ev.kind == "judged":
            self.refresh()
            self._maybe_train()

    # -- training -------------------------------------------------------------------------

    def train_now(self) -> bool:
        """Start a training step on what is ready now (up to a batch). False if it cannot start."""
        return self._maybe_train(force=True)

    # -- synchronous driving (the eval) ---------------------------------------------------

    def judge_pending(self) -> int:
        """Synchronous mode: judge on the calling thread until nothing judgeable is left; how many were.

        The background judge's own pass (:meth:`JudgeLoop.drain`), with the same events."""
        self._require_synchronous("judge_pending")
        with self._store() as store:
            return self._judges.drain(store)

    def train_ready(self) -> tuple[int, ...]:
        """Synchronous mode: train while a full batch is ready, on the calling thread; the versions made.

        Each run is followed, validated and its newest ready version hot-swapped in exactly as in
        the background, with the same events, before this returns. With too few samples nothing
        starts and :class:`~clawdesk.loop.events.TrainingSkipped` says how many are ready."""
        from clawdesk.learn.versions import list_versions

        self._require_synchronous("train_ready")
        with self._store() as store:
            before = max((v.version for v in list_versions(store)), default=0)
        self.refresh()
        if self.state.ready_samples < self.state.batch_size:
            state = self.state
            why = f"{state.ready_samples} of {state.batch_size} samples ready; training starts when a batch is full"
            self._emit(TrainingSkipped(why))
        # A run that makes no version (it failed, or was stopped) ends the loop: no retry on the same samples.
        while self.state.ready_samples >= self.state.batch_size and self._maybe_train(force=True):
            with self._store() as store:
                newest = max((v.version for v in list_versions(store)), default=0)
            if newest <= self._versions_before:
                break
        with self._store() as store:
            return tuple(v.version for v in list_versions(store) if v.version > before)

    def _require_synchronous(self, what: str) -> None:
        if not self.synchronous:  # the judge thread or a trainer run would race with this call
            raise RuntimeError(f"LearningLoop.{what} is for a loop built with synchronous=True")

    def _maybe_train(self, *, force: bool = False) -> bool:
        """Start one training step when learning is ON and a full batch is ready (or ``force``)."""
        from clawdesk.learn.versions import list_versions

        with self._lock:
            state = self._state
            if self._closed or self._trainer is not None:
                return False
            if not force and (not self.auto_train or state.ready_samples < state.batch_size):
                return False
            with self._store() as store:
                if not store.learning_enabled:
                    return False
                before = max((v.version for v in list_versions(store)), default=0)
            batch = min(state.ready_samples, state.batch_size) if force else state.batch_size
            if batch > 0:
                run = self._trainer = self.trainer.start(self.config, self.engine, batch)
                self._versions_before = before
                if run.process is not None:
                    self.pause.attach(run.process)
                self._update(running=True, phase="starting", message="starting the trainer")
        if batch == 0:
            self._emit(TrainingSkipped(NOTHING_JUDGED))
            return False
        self._emit(TrainingStarted(batch))
        self._spawn(lambda: self._watch_trainer(run), "trainer")
        return True

    def _watch_trainer(self, run: TrainerRun) -> None:
        """From the watcher thread (the caller's in synchronous mode): follow the run to its end."""
        last = {"error": "", "message": ""}

        def on_message(line: TrainerMessage) -> None:
            if isinstance(line, TrainerStarted):
                if line.pausable:
                    self.pause.arm()  # its death signal is set: the chat may stop it from now on
                state = self._update(phase="starting", message="")
            elif isinstance(line, TrainerFailed):
                last["error"] = last["message"] = line.error
                state = self._update(phase="error", message=line.error)
            else:
                last["message"] = line.message
                state = self._progress(line)
            self._emit(TrainingProgress(state.phase, state.step, state.steps, state.message, state.metrics))

        try:
            code = run.follow(on_message)
        finally:
            # Here, before anything else: the cores are free now, even if the loop is already closed.
            self.pause.detach()
        self._finished(code, last["error"], last["message"])

    def _progress(self, p: TrainProgress) -> LoopState:
        changes: dict = {"phase": p.phase, "step": p.step, "steps": p.steps, "message": p.message}
        if p.metrics:
            changes["metrics"] = dict(p.metrics)
        return self._update(**changes)

    def _finished(self, code: int, error: str, message: str) -> None:
        from clawdesk.learn.versions import list_versions

        with self._lock:
            self._trainer = None
            self._update(running=False)
            if self._closed:
                return  # the next start serves what it made (AdapterSwitch.sync)
        with self._store() as store:
            rows = [v for v in list_versions(store) if v.version > self._versions_before]
        if code != 0:
            self._emit(TrainingFailed(error))
        else:
            self._emit(TrainingFinished(tuple(v.version for v in rows), message))
            for r in rows:
                if r.status == "rejected":
                    self._emit(VersionRejected(r.version, r.note))
            ready = [r for r in rows if r.status == "ready"]
            if ready:
                newest = ready[-1]
                done = f"Learned adapter v{newest.version} from {newest.n_samples} turn(s); now serving it."
                self._swap("activate", newest.version, done=done)
        self.refresh()
        if rows:
            self._maybe_train()  # more full batches may be waiting

    # -- serving --------------------------------------------------------------------------

    def activate(self, n: int | None) -> None:
        """Serve version ``n`` (None: the base model) from the next reply on; answers with an event."""
        self._swap("activate", n)

    def rollback(self) -> None:
        """Serve the previous ready version (or the base model); answers with an event."""
        self._swap("rollback")

    def _swap(self, action: str, n: int | None = None, *, done: str = "") -> None:
        """Swap on a thread of its own: it waits for the engine lock while a reply finishes."""

        def work() -> None:
            try:
                with self._store() as store:
                    switch = AdapterSwitch(self.engine, store)
                    result = switch.rollback() if action == "rollback" else switch.activate(n)
            except ClawDeskError as err:
                self._emit(SwapFailed(str(err)))
                return
            if action == "rollback":
                message = f"Rolled back to v{result}." if result is not None else "Serving the base model."
            else:
                message = done or (f"Now serving adapter v{n}." if n is not None else "Serving the base model.")
            served = self._update(serving=self.engine.adapter_version).serving
            self._emit(VersionServed(served, message))

        self._spawn(work, "swap")
