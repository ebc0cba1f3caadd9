"""The headless learning loop (clawdesk/loop/) without any UI: what a front end other than the TUI gets.

Real SmolLM2 engine, real SQLite, real judge, real adapter files and hot-swaps; the loop is built by
``runtime.build_learning_loop`` exactly as the TUI builds it. The trainer launch is exercised in
test_engine_threads.py / test_trainer_pause.py (stand-in process) and test_ui_learning.py (real one).
"""

from __future__ import annotations

import dataclasses
import threading

import pytest

from clawdesk.agent import AgentService
from clawdesk.config import JudgeConfig, TrainConfig
from clawdesk.engine.gate import ChatGate
from clawdesk.loop import (
    JudgeProgress,
    LearningToggled,
    SamplesReady,
    SwapFailed,
    TrainingSkipped,
    VersionServed,
)
from clawdesk.runtime import build_learning_loop
from clawdesk.store.judgments import backlog, list_judged
from tests.support.demo_lora import add_version
from tests.support.loop import Events


@pytest.fixture
def config(config):
    return dataclasses.replace(config, judge=JudgeConfig(votes=2, max_tokens=48), train=TrainConfig(batch_size=1024))


def _history(engine, config, store, n: int) -> None:
    service = AgentService(engine, config.chat)
    session = service.new_session(store)
    for i in range(n):
        service.run_turn(store, session.id, f"Question number {i}: name a colour.")


def test_the_loop_judges_the_backlog_and_reports_it_with_events(engine, config, store):
    _history(engine, config, store, n=2)
    assert backlog(store)[0] == 1
    loop = build_learning_loop(config, store, engine, gate=ChatGate())
    events = Events()
    unsubscribe = loop.subscribe(events)
    loop.start()
    try:
        events.wait(lambda: loop.state.judge_ready == 0 and list_judged(store), "the turn to be judged")
        events.wait(lambda: events.of(SamplesReady), "the samples to be counted")
        assert any(e.judging.startswith("turn ") for e in events.of(JudgeProgress))  # votes were reported
        assert any(thread == "clawdesk-judge" for _, thread in events.seen)  # on the loop's own thread
        state = loop.state
        assert state.learning and not state.running and state.batch_size == 1024
        assert state.ready_samples == events.of(SamplesReady)[-1].ready

        # OFF: the judge stops at once, training cannot start, and a subscriber hears it.
        loop.set_learning(False)
        assert loop.judge.stop.is_set()
        assert events.of(LearningToggled)[-1] == LearningToggled(False)
        unsubscribe()
        count = len(events.seen)
        loop.turn_recorded()
        assert len(events.seen) == count  # unsubscribed: nothing more arrives
    finally:
        loop.close()
    assert loop.serving() == "base"


def test_train_now_with_nothing_judged_says_why(engine, config, store):
    loop = build_learning_loop(config, store, engine, gate=ChatGate())
    events = Events()
    loop.subscribe(events)
    try:
        loop.refresh()
        assert loop.train_now() is False
        assert events.of(TrainingSkipped) and "No judged turns" in events.of(TrainingSkipped)[0].reason
        assert not loop.state.running
    finally:
        loop.close()


def test_activate_and_rollback_hot_swap_and_answer_with_events(engine, config, store, tmp_path):
    add_version(store, tmp_path, 1, sha=engine.identity.sha256)
    add_version(store, tmp_path, 2, sha=engine.identity.sha256, seed=1)
    loop = build_learning_loop(config, store, engine, gate=ChatGate())
    events = Events()
    loop.subscribe(events)
    try:
        loop.activate(2)
        events.wait(lambda: events.of(VersionServed), "v2 to be served")
        assert events.of(VersionServed)[-1] == VersionServed(2, "Now serving adapter v2.")
        assert engine.adapter_version == 2 and loop.serving() == "v2" and loop.state.serving == 2
        loop.rollback()
        events.wait(lambda: len(events.of(VersionServed)) == 2, "the rollback")
        assert events.of(VersionServed)[-1] == VersionServed(1, "Rolled back to v1.")
        loop.activate(7)  # no such version: refused, and v1 stays served
        events.wait(lambda: events.of(SwapFailed), "the refusal")
        assert "v7" in events.of(SwapFailed)[0].error and engine.adapter_version == 1
        loop.activate(None)
        events.wait(lambda: len(events.of(VersionServed)) == 3, "the base model")
        assert engine.adapter_version is None and loop.serving() == "base"
    finally:
        loop.close()
        engine.clear_adapter()


def test_threads_opening_their_own_connections_at_once_never_trip_over_the_write_probe(tmp_path):
    """The loop's threads, the chat's turn worker and the UI each open a connection, often at the same moment."""
    from clawdesk.errors import DataDirError
    from clawdesk.store.db import ensure_dir

    errors: list[BaseException] = []

    def opener() -> None:
        try:
            for _ in range(300):
                ensure_dir(tmp_path)
        except DataDirError as exc:  # what a clash of two probes of one name raised
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []


def test_closing_the_model_right_after_the_loop_ends_the_judge_without_a_crash(config, store, demo_gguf):
    """The CLI closes the loop, then the model, while the judge may still be voting (it segfaulted)."""
    from clawdesk.engine import Engine
    from clawdesk.models import ResolvedModel

    own = Engine.load(ResolvedModel(name="demo", path=demo_gguf), sha256="t", n_ctx=1024, n_threads=1)
    _history(own, config, store, n=4)
    loop = build_learning_loop(config, store, own, gate=ChatGate())
    events = Events()
    loop.subscribe(events)
    loop.start()
    try:
        events.wait(lambda: events.of(JudgeProgress), "the judge to start voting")
    finally:
        loop.close()
        own.close()
    judge_thread = loop._judge_thread
    judge_thread.join(60)
    assert not judge_thread.is_alive()
    assert own.closed
