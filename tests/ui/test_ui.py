"""The Textual chat app, driven with Textual's pilot against a real Store and turn runner.

The model is the bundled SmolLM2 where the test is about serving a real reply, and the scripted
engine (tests/support/scripted_engine.py) where the test needs control over timing or a <think> block.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
from textual.command import CommandList, CommandPalette
from textual.widgets import Collapsible, Static

from clawdesk.config import ChatConfig, Config
from clawdesk.engine import Delta, Engine
from clawdesk.errors import NotFoundError
from clawdesk.models import DEMO_NOTE, resolve_model
from clawdesk.store import Store
from clawdesk.ui.app import ClawDeskApp
from clawdesk.ui.screens import ConfirmScreen, HelpScreen, RenameScreen
from clawdesk.ui.stream import ReplyBuffer, split_streaming
from clawdesk.ui.widgets import INCOGNITO_ICON, AssistantMessage, EmptyState, SessionItem
from tests.support.scripted_engine import ScriptedEngine
from tests.support.ui import SIZE, RecordingApp, send_and_wait, shown, type_and_send, wait_until

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"  # Textual runs on asyncio


@pytest.fixture
def config(tmp_path: Path) -> Config:
    """Overrides conftest's: greedy replies of at most 48 tokens, data in tmp_path."""
    return Config(home=tmp_path, chat=ChatConfig(temperature=0.0, max_reply_tokens=48))


@pytest.fixture
def store(config: Config):
    """Overrides conftest's: the app's main-thread store on ``config.db_path``."""
    s = Store.open(config.db_path)
    yield s
    s.close()


@pytest.fixture(scope="module")
def smol(tmp_path_factory) -> Engine:
    """The real engine on the bundled SmolLM2-135M."""
    tmp = tmp_path_factory.mktemp("models")
    engine = Engine.load(resolve_model("smollm2-135m", tmp, explicit=True), sha256="test", n_ctx=1024, n_threads=1)
    yield engine
    engine.close()


def marker(msg: AssistantMessage) -> str:
    widget = msg.query_one(".marker", Static)
    return str(widget.content) if widget.display else ""


# -- (1) a real reply from SmolLM2 ---------------------------------------------------------


async def test_real_reply_streams_and_is_recorded(config, store, smol, monkeypatch):
    progress: list[str] = []
    original = AssistantMessage.show_progress

    async def spy(self, raw, n_tokens):
        progress.append(raw)
        await original(self, raw, n_tokens)

    monkeypatch.setattr(AssistantMessage, "show_progress", spy)
    app = RecordingApp(config, smol, store)
    async with app.run_test(size=SIZE) as pilot:
        await send_and_wait(pilot, "What is the capital of France?")
        [(role_u, text_u), (role_a, text_a)] = shown(app)
        assert (role_u, text_u) == ("user", "What is the capital of France?")
        assert role_a == "assistant" and text_a.strip()
        assert "tok/s" in app.status_bar.plain and "– tok/s" not in app.status_bar.plain
        assert app.errors() == []

    # Text reached the screen while the reply was still being written, growing as it went.
    assert progress, "no streamed update reached the reply widget"
    assert all(b.startswith(a) for a, b in itertools.pairwise(progress))
    [session] = store.list_sessions()
    [turn] = store.list_turns(session.id)
    assert turn.user_content == "What is the capital of France?"
    assert turn.reply_content == text_a
    assert turn.status in ("finished", "length")
    assert turn.model_name == "smollm2-135m"
    prompt_ids, reply_ids = store.turn_tokens(turn.id)
    assert len(reply_ids) == turn.n_reply_tokens > 0
    assert prompt_ids and len(prompt_ids) == turn.n_prompt_tokens
    assert turn.reply_content in smol.llm.detokenize(reply_ids).decode("utf-8", errors="replace")


# -- (2) Esc stops a reply; length cut ------------------------------------------------------


async def test_escape_mid_reply_keeps_it_marked_cancelled(config, store):
    engine = ScriptedEngine(["one two three four five six seven eight nine ten " * 20], hold_after=4)
    app = RecordingApp(config, engine, store)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, "Count for me")
        await wait_until(pilot, engine.held.is_set, "the reply to reach its hold point")
        msg = app.chat_log.query_one(AssistantMessage)
        await wait_until(pilot, lambda: msg.answer.source == "one two three four", "the partial reply on screen")
        assert app.busy
        await pilot.press("escape")
        await wait_until(pilot, lambda: not app.busy, "the stopped reply to be recorded")
        await pilot.pause()
        assert marker(msg) == "(stopped)"
        assert msg.has_class("ended-early")
        assert msg.answer.source == "one two three four"
    [turn] = store.list_turns(store.list_sessions()[0].id)
    assert turn.status == "cancelled"
    assert turn.reply_content == "one two three four"
    _, reply_ids = store.turn_tokens(turn.id)
    assert len(reply_ids) == 4  # the four shown tokens, no end-of-generation token


async def test_reply_cut_at_max_tokens_is_marked(config, store):
    engine = ScriptedEngine(["word " * 100])
    app = RecordingApp(config, engine, store)
    async with app.run_test(size=SIZE) as pilot:
        await send_and_wait(pilot, "Talk a lot")
        msg = app.chat_log.query_one(AssistantMessage)
        assert marker(msg) == "(cut at length)"
    [turn] = store.list_turns(store.list_sessions()[0].id)
    assert (turn.status, turn.n_reply_tokens) == ("length", 48)


async def test_reply_that_loops_is_cut_and_says_why(tmp_path, store):
    config = Config(home=tmp_path, chat=ChatConfig(temperature=0.0, max_reply_tokens=500))
    engine = ScriptedEngine(["Paris is nice." + " la femme" * 100])  # a token a word: the loop has period 2
    app = RecordingApp(config, engine, store)
    async with app.run_test(size=SIZE) as pilot:
        await send_and_wait(pilot, "What is the capital of France?")
        msg = app.chat_log.query_one(AssistantMessage)
        assert marker(msg) == "(cut: it kept repeating itself)"
        assert msg.has_class("ended-early")
        assert msg.answer.source == "Paris is nice." + " la femme" * 32
    [turn] = store.list_turns(store.list_sessions()[0].id)
    # Recorded as a length cut after 3 + 64 tokens: the last 64 repeat with period 2 (chat.repeat_stop).
    assert (turn.status, turn.n_reply_tokens) == ("length", 67)


# -- (3) learning toggle persists -----------------------------------------------------------


async def test_learning_toggle_persists_across_restart(config, store):
    engine = ScriptedEngine()
    assert store.learning_enabled
    app = RecordingApp(config, engine, store)
    async with app.run_test(size=SIZE) as pilot:
        assert "learning ON" in app.status_bar.plain
        await pilot.press("ctrl+l")
        await pilot.pause()
        assert "learning OFF" in app.status_bar.plain
    assert not store.learning_enabled

    reopened = Store.open(config.db_path)
    try:
        app2 = RecordingApp(config, engine, reopened)
        async with app2.run_test(size=SIZE) as pilot:
            assert "learning OFF" in app2.status_bar.plain
            await pilot.press("ctrl+l")
            await pilot.pause()
            assert "learning ON" in app2.status_bar.plain
        assert reopened.learning_enabled
    finally:
        reopened.close()


# -- (4) sessions ---------------------------------------------------------------------------


async def test_new_chat_and_switching_show_the_right_turns(config, store):
    engine = ScriptedEngine(lambda user: f"Reply to {user}")
    app = RecordingApp(config, engine, store)
    async with app.run_test(size=SIZE) as pilot:
        assert app.chat_log.query(EmptyState)
        await send_and_wait(pilot, "alpha")
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert shown(app) == [] and app.chat_log.query(EmptyState)
        assert app.session is None  # a draft: saved on its first message
        await send_and_wait(pilot, "beta")
        assert shown(app) == [("user", "beta"), ("assistant", "Reply to beta")]

        sessions = store.list_sessions()
        assert [s.title for s in sessions] == ["beta", "alpha"]
        listing = app.session_list
        assert [item.session.id for item in listing.query(SessionItem)] == [s.id for s in sessions]
        listing.focus()
        listing.index = 1
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.session is not None and app.session.title == "alpha", "alpha to open")
        await pilot.pause()
        assert shown(app) == [("user", "alpha"), ("assistant", "Reply to alpha")]
        # The next message continues the opened chat, with its history in the prompt.
        await send_and_wait(pilot, "again")
        assert [t.user_content for t in store.list_turns(app.session.id)] == ["alpha", "again"]

    alpha = next(s for s in store.list_sessions() if s.title == "alpha")
    app2 = RecordingApp(config, engine, store, session_id=alpha.id)
    async with app2.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert shown(app2) == [
            ("user", "alpha"),
            ("assistant", "Reply to alpha"),
            ("user", "again"),
            ("assistant", "Reply to again"),
        ]
        assert app2.last_reply == "Reply to again"


async def test_incognito_rename_and_delete(config, store):
    engine = ScriptedEngine(["Sure."])
    app = RecordingApp(config, engine, store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+g")
        await pilot.pause()
        assert app.incognito and INCOGNITO_ICON in app.sub_title
        await send_and_wait(pilot, "a private question")
        [session] = store.list_sessions()
        assert session.incognito
        [item] = app.session_list.query(SessionItem)
        assert INCOGNITO_ICON in str(item.query_one("Label").content)

        await pilot.press("f2")
        await wait_until(pilot, lambda: isinstance(app.screen, RenameScreen), "the rename dialog")
        await pilot.press(*"Secret plans", "enter")
        await wait_until(pilot, lambda: store.get_session(session.id).title == "Secret plans", "the rename")
        await pilot.pause()
        assert "Secret plans" in app.sub_title

        app.session_list.focus()
        app.session_list.index = 0
        await pilot.press("delete")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the delete confirmation")
        await pilot.press("y")
        await wait_until(pilot, lambda: not store.list_sessions(), "the deletion")
        await pilot.pause()
        assert app.session is None and shown(app) == []
        assert store.count_turns() == 0


# -- (5) thinking ---------------------------------------------------------------------------


async def test_thinking_is_collapsed_and_stored_apart(config, store):
    engine = ScriptedEngine(
        ["<think>The user asks for 6*7. That is 42.</think>\n\nThe answer is **42**."], thinking=True
    )
    app = RecordingApp(config, engine, store)
    async with app.run_test(size=SIZE) as pilot:
        assert "thinking ON" in app.status_bar.plain
        await send_and_wait(pilot, "What is 6*7?")
        msg = app.chat_log.query_one(AssistantMessage)
        box = msg.query_one(".thinking", Collapsible)
        assert box.display and box.collapsed
        assert str(msg.query_one(".thinking-text", Static).content) == "The user asks for 6*7. That is 42."
        assert msg.answer.source == "The answer is **42**."

        await pilot.press("ctrl+t")
        await pilot.pause()
        assert "thinking OFF" in app.status_bar.plain
        assert not store.get_session(app.session.id).thinking
        await send_and_wait(pilot, "And 6*8?")

    first, second = store.list_turns(store.list_sessions()[0].id)
    assert first.reply_thinking == "The user asks for 6*7. That is 42."
    assert first.reply_content == "The answer is **42**."
    assert first.thinking and not second.thinking

    # Reopening the chat shows the earlier thinking, still collapsed.
    app2 = RecordingApp(config, engine, store, session_id=store.list_sessions()[0].id)
    async with app2.run_test(size=SIZE) as pilot:
        await pilot.pause()
        box = app2.chat_log.query(AssistantMessage).first().query_one(".thinking", Collapsible)
        assert box.display and box.collapsed


async def test_thinking_is_na_without_a_thinking_model(config, store):
    app = RecordingApp(config, ScriptedEngine(thinking=False), store)
    async with app.run_test(size=SIZE) as pilot:
        assert "thinking n/a" in app.status_bar.plain
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert "thinking n/a" in app.status_bar.plain
        assert any("no thinking mode" in m for m, sev in app.notes if sev == "warning")


# -- (6) bad input --------------------------------------------------------------------------


async def test_empty_and_oversized_messages_are_refused_and_kept(config, store):
    app = RecordingApp(config, ScriptedEngine(), store)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, "  \n  ")
        await pilot.pause()
        assert any("empty" in m for m in app.errors())

        huge = "x" * 200_000
        await type_and_send(pilot, huge)
        await pilot.pause()
        assert any("200,000 characters" in m for m in app.errors())
        assert app.chat_input.text == huge
        assert not app.busy
    assert store.count_turns() == 0
    assert store.list_sessions() == []


async def test_message_too_long_for_the_context_is_refused_and_kept(config, store):
    # Passes the character limit but not the model's context: refused inside the worker.
    engine = ScriptedEngine(n_ctx=256)
    app = RecordingApp(config, engine, store)
    text = "word " * 400
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, text)
        await wait_until(pilot, lambda: app.errors(), "the error notification")
        await pilot.pause()
        assert "too long for the model" in app.errors()[0]
        assert app.chat_input.text == text
        assert shown(app) == [] and app.chat_log.query(EmptyState)
        assert app.session is None
    assert store.list_sessions() == [] and store.count_turns() == 0


async def test_dropped_history_is_reported(tmp_path, store):
    config = Config(home=tmp_path, chat=ChatConfig(max_reply_tokens=48))
    engine = ScriptedEngine(["a reply of exactly ten words to fill the context up"], n_ctx=200)
    app = RecordingApp(config, engine, store)
    async with app.run_test(size=SIZE) as pilot:
        for i in range(6):
            await send_and_wait(pilot, f"message {i} " + "padding " * 20)
        notes = [m for m, _ in app.notes if "left out to fit the context window" in m]
    turns = store.list_turns(store.list_sessions()[0].id)
    assert turns[-1].dropped_turns > 0
    assert notes and notes[-1].startswith(str(turns[-1].dropped_turns) + " earlier exchange")


# -- (7) responsiveness and the rest ------------------------------------------------------


async def test_keys_are_handled_while_a_reply_is_written(config, store):
    engine = ScriptedEngine(["Thinking out loud about your question for a while."], hold_after=3)
    app = RecordingApp(config, engine, store)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, "Hello")
        await wait_until(pilot, engine.held.is_set, "the reply to reach its hold point")
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: "learning OFF" in app.status_bar.plain, "the learning toggle")
        assert app.busy and not store.learning_enabled  # handled before the reply ended
        await pilot.press(*"next")
        await pilot.press("enter")  # refused while busy; the text stays
        await pilot.pause()
        assert app.chat_input.text == "next"
        assert any("being written" in m for m, sev in app.notes if sev == "warning")
        await pilot.press("f1")  # a screen over the chat while the reply ends
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help screen")
        engine.release()
        await wait_until(pilot, lambda: not app.busy, "the reply to finish")
        await pilot.press("escape")
        await pilot.pause()
        assert shown(app)[-1] == ("assistant", "Thinking out loud about your question for a while.")
    [turn] = store.list_turns(store.list_sessions()[0].id)
    assert turn.status == "finished"
    assert turn.reply_content == "Thinking out loud about your question for a while."


async def test_quitting_mid_reply_stops_and_records_it(config, store):
    engine = ScriptedEngine(["never ending story " * 50], hold_after=2)
    app = RecordingApp(config, engine, store)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, "Tell me a story")
        await wait_until(pilot, engine.held.is_set, "the reply to reach its hold point")
        await pilot.press("ctrl+q")
    # The worker ends on its own (the app cancelled the reply) and records what was written.
    deadline = time.monotonic() + 30
    while store.count_turns() == 0:
        assert time.monotonic() < deadline, "the stopped reply was never recorded"
        time.sleep(0.01)
    [turn] = store.list_turns(store.list_sessions()[0].id)
    assert (turn.status, turn.reply_content) == ("cancelled", "never ending")


def test_unknown_session_is_refused_before_the_app_starts(config, store):
    with pytest.raises(NotFoundError, match="no session with id 42"):
        ClawDeskApp(config, ScriptedEngine(), store, session_id=42)


async def test_copy_help_demo_note_and_commands(config, store):
    engine = ScriptedEngine(["Copy me."], note=DEMO_NOTE)
    app = RecordingApp(config, engine, store)
    async with app.run_test(size=SIZE) as pilot:
        assert str(app.query_one("#demo-note", Static).content).endswith(DEMO_NOTE)
        await pilot.press("ctrl+y")
        assert any("no reply" in m for m, _ in app.notes)
        await send_and_wait(pilot, "say something")
        await pilot.press("ctrl+y")
        assert app.clipboard == "Copy me."

        await pilot.press("f1")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help screen")
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, HelpScreen), "the help screen to close")

        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {
            "New chat",
            "New incognito chat",
            "Toggle learning",
            "Toggle thinking",
            "Copy last reply",
            "Help",
        } <= titles


async def test_command_palette_runs_app_commands(config, store):
    app = RecordingApp(config, ScriptedEngine(), store)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette), "the command palette")
        await pilot.press(*"toggle learning")
        commands = app.screen.query_one(CommandList)
        await wait_until(pilot, lambda: commands.highlighted is not None, "a matching command")
        await pilot.press("enter")
        await wait_until(pilot, lambda: not store.learning_enabled, "learning to be switched off")
        assert "learning OFF" in app.status_bar.plain


async def test_shift_enter_and_ctrl_j_add_a_line_instead_of_sending(config, store):
    app = RecordingApp(config, ScriptedEngine(), store)
    async with app.run_test(size=SIZE) as pilot:
        app.chat_input.focus()
        await pilot.press("a", "shift+enter", "b", "ctrl+j", "c")
        await pilot.pause()
        assert app.chat_input.text == "a\nb\nc"
        assert not app.busy and store.count_turns() == 0


# -- stream hand-off ------------------------------------------------------------------------


def test_reply_buffer_wakes_the_ui_once_per_batch():
    buf = ReplyBuffer()
    wakes = [buf.push(Delta(text=f"t{i} ", thinking=False, n_tokens=i + 1)) for i in range(100)]
    assert wakes == [True] + [False] * 99
    snap = buf.take()
    assert snap.raw == "".join(f"t{i} " for i in range(100)) and snap.n_tokens == 100
    assert buf.push(Delta(text="more", thinking=False, n_tokens=101))
    assert buf.take().raw.endswith("t99 more")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("<thi", ("", "", True)),
        ("<think>Let me see", ("Let me see", "", True)),
        ("<think>Let me see</thi", ("Let me see", "", True)),
        ("<think>Let me see</think>\n\nHi", ("Let me see", "Hi", False)),
        ("Plain answer ", ("", "Plain answer", False)),
    ],
)
def test_split_streaming_hides_half_tags(raw, expected):
    assert split_streaming(raw) == expected
