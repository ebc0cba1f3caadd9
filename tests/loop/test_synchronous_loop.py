"""The learning loop in synchronous mode (what ``clawdesk eval`` drives): judging, training, validation and
the hot-swap on the caller's thread, only when asked, with the same events as in the background.

Real SmolLM2 engine, real SQLite, real judge; the in-process trainer really trains LoRA versions of the
demo model with torch and llama.cpp serves them. The trainer process is the stand-in of
tests/support/loop.py (the real process is exercised in test_trainer.py).
"""

from __future__ import annotations

import dataclasses
import threading

import pytest

from clawdesk.config import JudgeConfig, TrainConfig
from clawdesk.engine.gate import ChatGate
from clawdesk.loop import (
    JudgeProgress,
    SamplesReady,
    TrainingFailed,
    TrainingFinished,
    TrainingProgress,
    TrainingSkipped,
    TrainingStarted,
    VersionServed,
)
from clawdesk.loop.trainers import InProcessTrainer
from clawdesk.runtime import build_learning_loop
from clawdesk.store.judgments import backlog, list_judged
from clawdesk.testing.judged_log import fill_judged
from tests.support.loop import Events, loop_with_a_ready_sample, stand_in_trainer


@pytest.fixture
def config(config):
    # No guard texts: a step on random token ids is kept (validation itself is tested with the trainer).
    train = TrainConfig(batch_size=2, epochs=1, max_ppl_ratio=0)
    return dataclasses.replace(config, judge=JudgeConfig(votes=2, max_tokens=48), train=train)


def _threads(events: Events) -> set[str]:
    return {thread for _, thread in events.seen}


def test_judge_pending_judges_the_backlog_on_the_calling_thread_and_only_when_asked(engine, config, store):
    ids = fill_judged(config.db_path, 3, seed=0, vocab=100, sha=engine.identity.sha256, judged=False)
    loop = build_learning_loop(config, store, engine, gate=ChatGate(), synchronous=True)
    events = Events()
    loop.subscribe(events)
    try:
        loop.start()
        loop.turn_recorded()
        assert not any(t.name == "clawdesk-judge" for t in threading.enumerate())  # no background judge
        assert backlog(store)[0] == 2 and not list_judged(store)
        assert loop.judge_pending() == 2
        assert sorted(j.turn_id for j in list_judged(store)) == ids[:2] and backlog(store)[0] == 0
        assert any(e.judging.startswith(f"turn {ids[0]}: vote ") for e in events.of(JudgeProgress))
        assert events.of(JudgeProgress)[-1] == JudgeProgress("", 0, 1)  # the last turn waits for its next state
        assert _threads(events) == {threading.current_thread().name}
        assert loop.judge_pending() == 0
    finally:
        loop.close()


def test_the_background_loop_refuses_synchronous_calls(engine, config, store):
    loop = build_learning_loop(config, store, engine, gate=ChatGate())
    try:
        with pytest.raises(RuntimeError, match="synchronous=True"):
            loop.train_ready()
    finally:
        loop.close()


def test_train_ready_trains_validates_and_serves_with_the_in_process_trainer(engine, config, store):
    sha = engine.identity.sha256
    fill_judged(config.db_path, 4, seed=0, vocab=100, sha=sha)  # two full batches
    trainer = InProcessTrainer(seed=0, threads=1)
    loop = build_learning_loop(config, store, engine, gate=ChatGate(), trainer=trainer, synchronous=True)
    events = Events()
    loop.subscribe(events)
    try:
        loop.start()
        assert loop.train_ready() == (1, 2)  # one run: as many versions as full batches are ready
        assert engine.adapter_version == 2 and loop.state.serving == 2  # swapped in before it returned
        story = [type(e) for e, _ in events.seen if not isinstance(e, SamplesReady | TrainingProgress)]
        assert story == [TrainingStarted, TrainingFinished, VersionServed]
        assert events.of(TrainingStarted) == [TrainingStarted(2)]
        assert events.of(TrainingFinished)[0].versions == (1, 2)
        assert events.of(VersionServed) == [VersionServed(2, "Learned adapter v2 from 2 turn(s); now serving it.")]
        phases = [e.phase for e in events.of(TrainingProgress)]
        assert phases[0] == "loading" and "step" in phases and phases[-1] == "done"
        assert _threads(events) == {threading.current_thread().name}
        assert trainer.learner is not None and not loop.state.running and loop.state.ready_samples == 0

        # Nothing full is left: nothing starts, and the loop says why.
        assert loop.train_ready() == ()
        assert events.of(TrainingSkipped)[-1] == TrainingSkipped(
            "0 of 2 samples ready; training starts when a batch is full"
        )

        # A failing run reaches the loop as the process's last line would: no version, the samples stay ready.
        fill_judged(config.db_path, 2, seed=1, vocab=10**6, sha=sha, rewards=(1,))  # ids the base never served
        assert loop.train_ready() == ()
        assert "outside the base's vocabulary" in events.of(TrainingFailed)[0].error
        assert loop.state.phase == "error" and loop.state.ready_samples == 2 and engine.adapter_version == 2
    finally:
        loop.close()
        engine.clear_adapter()


def test_the_trainer_process_is_followed_by_the_same_watcher_on_the_calling_thread(
    engine, config, store, monkeypatch, tmp_path
):
    release = tmp_path / "release"
    release.touch()  # the stand-in prints its lines and exits at once
    stand_in_trainer(monkeypatch, release, first={"phase": "starting", "pausable": False})
    config = dataclasses.replace(config, train=TrainConfig(batch_size=1))
    loop = loop_with_a_ready_sample(config, engine, synchronous=True)
    events = Events()
    loop.subscribe(events)
    try:
        assert loop.train_ready() == ()  # the stand-in makes no version: the loop does not launch it again
        assert events.of(TrainingStarted) == [TrainingStarted(1)]
        assert [e.phase for e in events.of(TrainingProgress)] == ["starting", "done"]
        assert events.of(TrainingFinished) == [TrainingFinished((), "")]
        assert _threads(events) == {threading.current_thread().name}
        assert not loop.state.running and not engine.threads.busy
    finally:
        loop.close()
