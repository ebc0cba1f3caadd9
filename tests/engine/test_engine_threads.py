"""The engine's thread budget: every core while nothing else computes, its share while it does.

A real llama.cpp engine on the demo model; the thread counts are read back from llama.cpp's
context, not from the Python side's bookkeeping. The trainer launch is a stand-in process (the
real trainer is exercised in test_trainer.py): what matters here is the flag around it. The
flag tests leave other programs' CPU use out (``threads.load = None``: a busy neighbour on the
test machine must not decide them); the tests at the end put it back, with a real busy process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from clawdesk.config import JudgeConfig
from clawdesk.engine import Engine, SamplingParams
from clawdesk.engine.cpu_load import OtherLoad, niced
from clawdesk.engine.threads import ThreadBudget, all_threads, default_threads
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
    assert isinstance(eng.threads.load, OtherLoad)  # automatic threads measure other programs
    eng.threads.load = None  # the flag tests: see the module docstring
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


def test_only_automatic_threads_measure_other_programs():
    assert isinstance(ThreadBudget.for_app(0).load, OtherLoad)
    fixed = ThreadBudget.for_app(2)
    assert fixed.load is None and fixed.wanted() is None


@needs_two_cores
def test_a_busy_program_takes_a_thread_and_gives_it_back_when_it_stops(auto_engine):
    """A real busy process beside the engine: one thread fewer while it runs, every core after."""
    auto_engine.threads.load = load = OtherLoad(interval=0.5)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        load.cores()  # the window starts
        time.sleep(2.0)  # a window in which it ran the whole time
        assert load.cores() > 0.6
        _reply(auto_engine)
        assert auto_engine.context_threads() == (all_threads() - 1, all_threads() - 1)
        with auto_engine.threads.busy_while("trainer"):  # the app's own flag still counts too
            _reply(auto_engine)
            assert auto_engine.context_threads()[0] == min(default_threads(), all_threads() - 1)
    finally:
        spinner.kill()
        spinner.wait()
    try:
        time.sleep(2.0)  # a window without it
        _reply(auto_engine)
        assert auto_engine.context_threads() == (all_threads(), all_threads())
    finally:
        auto_engine.threads.load = None


@needs_two_cores
@pytest.mark.skipif(niced(), reason="this process is niced itself: niced work counts as its equal")
def test_a_niced_busy_program_leaves_the_engine_every_core(auto_engine):
    """Lower-priority work yields to the chat, and 2 threads beat 1 beside it (bench/sec_contention.py)."""
    auto_engine.threads.load = load = OtherLoad(interval=0.5)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    os.setpriority(os.PRIO_PROCESS, spinner.pid, 10)
    try:
        load.cores()
        time.sleep(2.0)
        _reply(auto_engine)
        assert auto_engine.context_threads() == (all_threads(), all_threads())
    finally:
        spinner.kill()
        spinner.wait()
        auto_engine.threads.load = None
