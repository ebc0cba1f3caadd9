"""The engine's thread budget: every core while nothing else computes, its share while it does.

A real llama.cpp engine on the demo model; the thread counts are read back from llama.cpp's
context, not from the Python side's bookkeeping. The trainer launch is a stand-in process (the
real trainer is exercised in test_trainer.py): what matters here is the flag around it.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from clawdesk.config import JudgeConfig
from clawdesk.engine import Engine, SamplingParams
from clawdesk.engine.threads import all_threads, default_threads
from clawdesk.judge.runner import Judge
from clawdesk.judge.vote import NextState
from clawdesk.models import DEMO_NAME, resolve_model
from tests.support.loop import loop_with_a_ready_sample, stand_in_trainer, wait_for

PARAMS = SamplingParams(temperature=0.0, max_tokens=8)

needs_two_cores = pytest.mark.skipif(
    all_threads() == default_threads(), reason="one core: 'all' and 'the share' are the same count"
)


@pytest.fixture(scope="module")
def auto_engine(demo_gguf):
    """An engine with ``model.n_threads = 0`` (automatic), unlike the session's fixed one."""
    eng = Engine.load(resolve_model(DEMO_NAME, Path("/nonexistent"), explicit=True), sha256="test-sha", n_ctx=512)
    yield eng
    eng.close()


def _reply(engine: Engine, text: str = "Name a colour.", **kwargs):
    ids = engine.build_prompt("", [], text, thinking=False, reply_room=64).token_ids
    reply = engine.generate(ids, PARAMS, **kwargs)
    assert reply.status in ("finished", "length") and reply.reply_ids, reply
    return reply


@needs_two_cores
def test_automatic_threads_follow_background_work_and_generation_still_works(auto_engine):
    all_, share = all_threads(), default_threads()
    _reply(auto_engine)
    assert auto_engine.context_threads() == (all_, all_)  # nothing else runs: every core

    auto_engine.threads.set_busy("trainer", True)
    try:
        _reply(auto_engine)
        assert auto_engine.context_threads() == (share, share)
        auto_engine.threads.set_busy("judge", True)  # a second reason, then the first one ends
        auto_engine.threads.set_busy("trainer", False)
        _reply(auto_engine)
        assert auto_engine.context_threads() == (share, share)
    finally:
        auto_engine.threads.set_busy("judge", False)
        auto_engine.threads.set_busy("trainer", False)

    _reply(auto_engine)
    assert auto_engine.context_threads() == (all_, all_)


@needs_two_cores
def test_a_trainer_starting_mid_reply_takes_effect_at_the_next_token(auto_engine):
    _reply(auto_engine, "Count to ten.")
    assert auto_engine.context_threads()[0] == all_threads()
    seen: list[int] = []

    def on_delta(delta) -> None:
        seen.append(delta.n_tokens)
        if len(seen) == 1:
            auto_engine.threads.set_busy("trainer", True)  # from the UI thread, in real life

    try:
        reply = auto_engine.generate(
            auto_engine.build_prompt("", [], "Count to twenty.", thinking=False, reply_room=64).token_ids,
            SamplingParams(temperature=0.0, max_tokens=6),
            on_delta=on_delta,
        )
        assert len(reply.reply_ids) > 1
        assert auto_engine.context_threads() == (default_threads(), default_threads())
    finally:
        auto_engine.threads.set_busy("trainer", False)


def test_a_fixed_thread_count_is_never_changed(engine):
    """The session engine has ``n_threads=1`` (the user's fixed value)."""
    _reply(engine)
    loaded = engine.context_threads()
    assert loaded[0] == 1
    with engine.threads.busy_while("trainer"):
        _reply(engine)
        assert engine.context_threads() == loaded
    _reply(engine)
    assert engine.context_threads() == loaded


def test_setting_a_flag_does_not_wait_for_a_reply_in_progress(auto_engine):
    """The UI thread flips the flag while a reply holds the engine lock; it must not block."""
    flipped = threading.Event()

    def on_delta(delta) -> None:
        if not flipped.is_set():
            t = threading.Thread(target=lambda: (auto_engine.threads.set_busy("trainer", True), flipped.set()))
            t.start()
            t.join(timeout=30)  # would hang (and fail below) if set_busy took the engine lock
            assert flipped.is_set()

    try:
        auto_engine.generate(
            auto_engine.build_prompt("", [], "Hello.", thinking=False, reply_room=64).token_ids,
            PARAMS,
            on_delta=on_delta,
        )
    finally:
        auto_engine.threads.set_busy("trainer", False)
    assert flipped.is_set()


def test_a_judge_on_another_engine_marks_the_served_engine_busy_only_while_it_computes(engine, auto_engine):
    cfg = JudgeConfig(votes=1, max_tokens=16, method="sampled")
    seen: list[bool] = []
    original = auto_engine.generate

    def spy(*args, **kwargs):
        seen.append(engine.threads.busy)
        return original(*args, **kwargs)

    auto_engine.generate = spy  # the judge's engine; ``engine`` is the served one
    try:
        Judge(auto_engine, cfg, policy=engine).vote("Hi", "Hello!", NextState("Thanks."), seed=1)
    finally:
        del auto_engine.generate
    assert seen and all(seen)
    assert not engine.threads.busy

    seen.clear()
    original = engine.generate
    engine.generate = spy  # the judge on the served engine itself: serialized by its lock, not busy
    try:
        Judge(engine, cfg).vote("Hi", "Hello!", NextState("Thanks."), seed=1)
    finally:
        del engine.generate
    assert seen and not any(seen)


def test_the_learning_loop_marks_the_engine_busy_while_the_trainer_process_runs(
    config, store, engine, monkeypatch, tmp_path
):
    from clawdesk.loop import TrainingFailed, TrainingFinished, TrainingStarted

    release = tmp_path / "release"
    stand_in_trainer(monkeypatch, release)
    loop = loop_with_a_ready_sample(config, engine)
    events: list = []
    loop.subscribe(events.append)
    try:
        assert not engine.threads.busy
        assert loop.train_now()
        assert engine.threads.busy  # from the launch on, before the process says anything
        assert loop.state.running
        release.touch()
        wait_for(lambda: not loop.state.running, "the trainer to end")
        assert not engine.threads.busy  # as soon as the process has exited
        wait_for(lambda: any(isinstance(e, TrainingFinished) for e in events), "the finished event")
    finally:
        loop.close()
    assert isinstance(events[0], TrainingStarted) and events[0].batch == 1
    assert not any(isinstance(e, TrainingFailed) for e in events), events
    assert next(e for e in events if isinstance(e, TrainingFinished)).versions == ()


def test_clawdesk_ask_has_no_background_work(auto_engine):
    """A fresh engine (the CLI's ``ask``) starts and stays on every core."""
    assert not auto_engine.threads.busy
    assert auto_engine.threads.wanted() == all_threads()
    _reply(auto_engine)
    assert auto_engine.context_threads() == (all_threads(), all_threads())
