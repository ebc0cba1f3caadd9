"""The chat with background learning ON: judging yields to the chat, toggles, thumbs, screens, hot-swap.

Real SmolLM2 engine, real SQLite, real judge; the trainer is exercised in test_trainer.py (here a
batch size larger than any backlog keeps it from starting on its own).
"""

from __future__ import annotations

import re
import threading
import time

import pytest

from clawdesk.agent import AgentService
from clawdesk.config import ChatConfig, Config, JudgeConfig, TrainConfig
from clawdesk.reload import ACTIVE_KEY
from clawdesk.store import Store
from clawdesk.store.judgments import backlog, list_judged
from clawdesk.ui.app import ClawDeskApp
from clawdesk.ui.learning_screens import LearnedScreen, LearningScreen
from clawdesk.ui.messages import TurnRecorded
from tests.support.demo_lora import add_version
from tests.support.ui import send_and_wait, wait_until

pytestmark = pytest.mark.anyio
SIZE = (110, 34)


@pytest.fixture
def anyio_backend():
    return "asyncio"


class LearningApp(ClawDeskApp):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, learning=True, **kwargs)
        self.recorded: list[TurnRecorded] = []
        self.notes: list[str] = []

    def on_turn_recorded(self, message: TurnRecorded) -> None:
        self.recorded.append(message)

    def notify(self, message, **kwargs):
        self.notes.append(str(message))
        super().notify(message, **kwargs)


@pytest.fixture
def config(tmp_path) -> Config:
    return Config(
        home=tmp_path,
        chat=ChatConfig(temperature=0.0, max_reply_tokens=24),
        judge=JudgeConfig(votes=2, max_tokens=96, method="sampled"),  # token-level preemption is timed on sampled votes
        train=TrainConfig(batch_size=1024),
    )


@pytest.fixture
def store(config):
    s = Store.open(config.db_path)
    yield s
    s.close()


def _history(engine, config, store, n: int = 3) -> int:
    service = AgentService(engine, config.chat)
    session = service.new_session(store)
    for i in range(n):
        service.run_turn(store, session.id, f"Question number {i}: name a colour.")
    return session.id


class GenerateSpy:
    """Wraps engine.generate to time chat calls and count judge tokens (via an injected on_delta)."""

    def __init__(self, engine):
        self.engine = engine
        self.original = engine.generate
        self.judge_tokens: list[float] = []  # monotonic time of each judge token
        self.judge_calls: list[tuple[float, float, str]] = []
        self.chat_starts: list[float] = []
        self.chat_ends: list[float] = []
        engine.generate = self

    def __call__(self, prompt_ids, params, **kwargs):
        if kwargs.get("use_adapter", True) is False:
            kwargs["on_delta"] = lambda d: self.judge_tokens.append(time.monotonic())
            start = time.monotonic()
            reply = self.original(prompt_ids, params, **kwargs)
            self.judge_calls.append((start, time.monotonic(), reply.status))
            return reply
        self.chat_starts.append(time.monotonic())
        try:
            return self.original(prompt_ids, params, **kwargs)
        finally:
            self.chat_ends.append(time.monotonic())

    def close(self):
        del self.engine.generate


async def test_chat_reply_starts_while_judging_pauses(engine, config, store):
    session_id = _history(engine, config, store)
    assert backlog(store)[0] == 2
    spy = GenerateSpy(engine)
    app = LearningApp(config, engine, store, session_id=session_id)
    gate_entered: list[float] = []
    original_enter = app.service.gate.__class__.__enter__

    def enter(gate):
        gate_entered.append(time.monotonic())
        return original_enter(gate)

    app.service.gate.__class__.__enter__ = enter
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(spy.judge_tokens) >= 3, "the judge to be generating", timeout=120)
            await send_and_wait(pilot, "And one more colour?")
            assert spy.chat_starts, "the chat reply never started"
            t_gate = gate_entered[-1]
            # The judge stopped at most one token after the chat asked for the engine...
            assert sum(1 for t in spy.judge_tokens if t_gate < t < spy.chat_starts[-1]) <= 1
            paused = [c for c in spy.judge_calls if c[2] == "cancelled" and c[0] < t_gate <= c[1]]
            assert paused, "no judge vote was paused for the chat"
            # ...and no judge token was generated while the reply was being written.
            assert not any(spy.chat_starts[-1] < t < spy.chat_ends[-1] for t in spy.judge_tokens)
            # Judging resumes afterwards and clears the backlog (now including the previous last turn).
            await wait_until(pilot, lambda: backlog(app.store)[0] == 0, "the backlog to be judged", timeout=300)
            # The judgment is saved before the loop's event reaches the UI (seen: "judging turn 3: vote 4/4"
            # still shown one pause after the backlog emptied), so wait for the status line itself.
            await wait_until(
                pilot, lambda: re.search(r"\bjudge 0\b", app.status_bar.plain), "the status to say judge 0", timeout=30
            )
    finally:
        app.service.gate.__class__.__enter__ = original_enter
        spy.close()
    assert len(list_judged(store)) == 3


async def test_the_chat_judges_on_the_judge_model(engine, config, store, demo_gguf):
    """``judge.model`` is honoured in the chat: the background judge runs on that GGUF, never on the served engine."""
    import dataclasses

    config = dataclasses.replace(config, judge=dataclasses.replace(config.judge, model=str(demo_gguf)))
    session_id = _history(engine, config, store, n=2)
    spy = GenerateSpy(engine)  # counts judge calls (adapter off) on the served engine
    app = LearningApp(config, engine, store, session_id=session_id)
    try:
        async with app.run_test(size=SIZE) as pilot:
            judge_engine = app.learning.loop.judge.engine
            assert judge_engine is not engine and judge_engine.identity.path == demo_gguf.resolve()
            assert app.learning.loop.judge.policy is engine  # the teacher prompt is still the served model's
            await wait_until(pilot, lambda: backlog(app.store)[0] == 0, "the backlog to be judged", timeout=300)
    finally:
        spy.close()
    assert len(list_judged(store)) == 1
    assert spy.judge_calls == [], "the served engine judged although judge.model names another GGUF"


async def test_a_missing_judge_model_leaves_the_chat_working_without_learning(engine, config, store, tmp_path):
    import dataclasses

    missing = tmp_path / "no-such-judge.gguf"
    config = dataclasses.replace(config, judge=dataclasses.replace(config.judge, model=str(missing)))
    app = LearningApp(config, engine, store)
    async with app.run_test(size=SIZE) as pilot:
        assert app.learning is None
        assert any("Background learning is not running" in n and str(missing) in n for n in app.notes), app.notes
        await send_and_wait(pilot, "Name a colour.")  # the chat itself still works


async def test_learning_off_stops_judging_and_thumbs_override(engine, config, store):
    session_id = _history(engine, config, store, n=2)
    app = LearningApp(config, engine, store, session_id=session_id)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+l")  # OFF
        await pilot.pause()
        assert store.learning_enabled is False
        assert app.learning.loop.judge.stop.is_set()
        assert "judge" not in app.status_bar.plain
        time.sleep(0.5)
        assert list_judged(store) == []  # nothing judged while OFF
        assert app.learning.loop.train_now() is False  # OFF: no training starts either
        await pilot.press("f4")  # thumbs down for the last reply
        await pilot.pause()
        row = store.db.execute("select rating from feedback").fetchone()
        assert row == (-1,)
        await pilot.press("ctrl+l")  # ON again: judging resumes
        await wait_until(pilot, lambda: backlog(app.store)[0] == 0, "judging to resume", timeout=300)


async def test_learned_screen_veto_and_delete(engine, config, store):
    session_id = _history(engine, config, store, n=3)
    app = LearningApp(config, engine, store, session_id=session_id)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: backlog(app.store)[0] == 0, "the backlog to be judged", timeout=300)
        await pilot.press("f5")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, LearnedScreen)
        assert screen.query_one("DataTable").row_count == 2
        first = screen._ids[0]
        await pilot.press("v")
        await pilot.pause()
        assert next(r for r in list_judged(store) if r.turn_id == first).vetoed
        await pilot.press("d")
        await pilot.pause()
        assert first not in [r.turn_id for r in list_judged(store)]
        assert screen.query_one("DataTable").row_count == 1
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, LearnedScreen)


async def test_hot_swap_during_a_chat(engine, config, store, tmp_path):
    session_id = _history(engine, config, store, n=1)
    add_version(store, tmp_path, 1)
    time.sleep(0.01)
    store.set_setting(ACTIVE_KEY, None)  # the person chose the base model after v1 was made
    store.set_learning(False)  # keep the judge out of this test
    app = LearningApp(config, engine, store, session_id=session_id)
    try:
        async with app.run_test(size=SIZE) as pilot:
            started = threading.Event()
            original = engine.generate

            def slow(*args, **kwargs):  # note the reply is under way before the swap is asked for
                started.set()
                return original(*args, **kwargs)

            engine.generate = slow
            app.chat_input.text = "Tell me a story about a lighthouse."
            await pilot.press("enter")
            await wait_until(pilot, started.is_set, "the reply to start")
            app.learning.loop.activate(1)
            await wait_until(pilot, lambda: len(app.recorded) == 1, "the reply to finish")
            await wait_until(pilot, lambda: engine.adapter_version == 1, "the swap")
            del engine.generate
            first = store.list_turns(session_id)[-1]
            assert first.adapter_version is None  # finished on the old (base) weights
            await send_and_wait(pilot, "Another one?")
            assert store.list_turns(session_id)[-1].adapter_version == 1
            await pilot.pause()
            assert "v1" in app.status_bar.plain
            await pilot.press("f6")
            await pilot.pause()
            assert isinstance(app.screen, LearningScreen)
            assert app.screen.query_one("#versions").row_count == 1
            await pilot.press("o")  # back to the base model
            await wait_until(pilot, lambda: engine.adapter_version is None, "serving the base again")
    finally:
        engine.clear_adapter()


@pytest.mark.slow
async def test_end_to_end_judge_train_and_hot_swap(engine, config, store):
    """A judged, thumbed-up turn trains v1 in the trainer process, and the chat starts serving it."""
    import dataclasses

    from clawdesk.store.judgments import set_rating

    config = dataclasses.replace(config, train=TrainConfig(batch_size=1))
    session_id = _history(engine, config, store, n=2)
    first = store.list_turns(session_id)[0].id
    set_rating(store, first, 1)  # the person liked the first reply
    # The trainer process identifies the base by the served file's real sha256.
    from clawdesk.engine import Engine
    from clawdesk.models import file_sha256, resolve_model

    model = resolve_model("smollm2-135m", config.models_dir, explicit=True)
    real = Engine.load(model, sha256=file_sha256(model.path), n_ctx=1024, n_threads=1)
    store.db.execute("UPDATE turns SET model_sha256 = ?", [real.identity.sha256])
    store.db.conn.commit()
    app = LearningApp(config, real, store, session_id=session_id)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.learning.loop.state.running, "training to start", timeout=300)
            await wait_until(pilot, lambda: real.adapter_version == 1, "v1 to be trained and served", timeout=600)
            await pilot.pause()
            assert "v1" in app.status_bar.plain
            assert any("now serving it" in n for n in app.notes)
            await send_and_wait(pilot, "Thanks! One more colour?")
            assert store.list_turns(session_id)[-1].adapter_version == 1
    finally:
        real.close()
    row = store.db.execute("select status, n_samples from adapters where version = 1").fetchone()
    assert row == ("ready", 1)
    assert (config.adapters_dir / "v1" / "adapter.gguf").is_file()
