"""The chat app with tools: tool blocks, the consent dialog, Esc while it asks, the tools status.

The model is the scripted engine (tests/support/scripted_engine.py) rendering prompts with Qwen3's real chat
template (clawdesk.testing.qwen3_assets), so its replies can hold ``<tool_call>`` blocks; everything
after the model boundary is real: AgentService, the registry with its workspace jail and consent,
the files on disk and the SQLite log.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import Button, Input
from textual.widgets._collapsible import CollapsibleTitle

from clawdesk.config import ChatConfig, Config
from clawdesk.store import Store
from clawdesk.store.steps import list_steps, turn_tool_calls
from clawdesk.testing.qwen3_assets import Qwen3AssetsError, qwen3_assets
from clawdesk.tools.registry import build_registry
from clawdesk.ui import consent
from clawdesk.ui.agent_view import NEEDS_TOOL_MODEL
from clawdesk.ui.consent import ConsentScreen
from clawdesk.ui.stream import ReplyBuffer, hide_tool_calls
from clawdesk.ui.tool_widgets import SCREEN_RESULT_CHARS, ToolBlock, call_summary, step_lines
from clawdesk.ui.widgets import AssistantMessage
from tests.support.scripted_engine import ScriptedEngine
from tests.support.ui import SIZE, RecordingApp, send_and_wait, shown, type_and_send, wait_until

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def qwen3_template() -> str:
    try:
        return qwen3_assets().template
    except Qwen3AssetsError as exc:  # no registry and no cache: fail loudly, never skip
        pytest.fail(str(exc))


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return Config(home=tmp_path, chat=ChatConfig(temperature=0.0, max_reply_tokens=200, thinking=False))


@pytest.fixture
def store(config: Config):
    s = Store.open(config.db_path)
    yield s
    s.close()


@pytest.fixture
def registry(config: Config):
    reg = build_registry(config)
    yield reg
    reg.close()


@pytest.fixture
def workspace(config: Config) -> Path:
    path = config.workspace_dir
    path.mkdir(parents=True, exist_ok=True)
    return path


def call(name: str, **arguments) -> str:
    """A reply that only calls one tool, as Qwen3 writes it."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def tool_engine(template: str, replies) -> ScriptedEngine:
    return ScriptedEngine(replies, template=template, name="qwen3-4b")


def prompt_text(engine: ScriptedEngine, n: int) -> str:
    """The n-th prompt the scripted model was given, as text."""
    text_of = {i: piece for piece, i in engine._vocab.items()}
    return "".join(text_of[i] for i in engine.prompts[n])


def blocks(app) -> list[ToolBlock]:
    return list(app.chat_log.query(ToolBlock))


def only_turn(store: Store):
    [session] = store.list_sessions()
    [turn] = store.list_turns(session.id)
    return turn


async def open_consent(pilot, text: str) -> ConsentScreen:
    await type_and_send(pilot, text)
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, ConsentScreen), "the consent dialog")
    await pilot.pause()
    await wait_until(pilot, lambda: pilot.app.screen.armed, "the dialog to take answers")
    return pilot.app.screen


# -- blocks ---------------------------------------------------------------------------------


async def test_tool_block_renders_collapsed_opens_and_comes_back_from_the_log(
    config, store, registry, workspace, qwen3_template, monkeypatch
):
    answers: list[str] = []  # every answer text the reply widget was given while streaming
    original = AssistantMessage._set_answer

    async def spy(self, text):
        answers.append(text)
        await original(self, text)

    monkeypatch.setattr(AssistantMessage, "_set_answer", spy)
    long_text = "Question 3: what is 6 x 7?\n" + "Show your working. " * 150  # > SCREEN_RESULT_CHARS
    (workspace / "homework").mkdir()
    (workspace / "homework" / "3.txt").write_text(long_text)
    engine = tool_engine(qwen3_template, [call("read_file", path="homework/3.txt"), "It asks for 6 x 7, which is 42."])
    engine.token_delay = 0.01  # slow enough that the UI renders the call while it streams
    app = RecordingApp(config, engine, store, registry=registry)
    async with app.run_test(size=SIZE) as pilot:
        await send_and_wait(pilot, "What does homework 3 ask?")
        [block] = blocks(app)
        assert block.summary == "read_file homework/3.txt"
        assert block.collapsed and block.status == "ok" and block.has_class("tool-ok")
        # The streamed <tool_call> text never reaches the answer; the final answer is the last step's.
        assert shown(app) == [("user", "What does homework 3 ask?"), ("assistant", "It asks for 6 x 7, which is 42.")]
        await pilot.click(block.query_one(CollapsibleTitle))
        await pilot.pause()
        assert not block.collapsed
        body = block.body_text
        assert '"path": "homework/3.txt"' in body and "Question 3: what is 6 x 7?" in body
        assert "more characters; the full result is in the chat log" in body
        assert len(body) < len(long_text)
        assert app.errors() == []
    assert answers and not any("tool_call" in text for text in answers)

    # The log has the whole result, and the model read it in the second step's prompt.
    turn = only_turn(store)
    [(_, record)] = turn_tool_calls(store, turn.id)
    assert (record.name, record.status) == ("read_file", "ok")
    assert len(record.result) > SCREEN_RESULT_CHARS and "Show your working." in record.result[-200:]
    assert "Question 3: what is 6 x 7?" in prompt_text(engine, 1)

    # Reopening the chat rebuilds the block from the steps / tool_calls tables.
    again = RecordingApp(config, tool_engine(qwen3_template, ["unused"]), store, session_id=turn.session_id)
    async with again.run_test(size=SIZE) as pilot:
        await pilot.pause()
        [block] = blocks(again)
        assert (block.summary, block.status, block.collapsed) == ("read_file homework/3.txt", "ok", True)
        assert "Question 3: what is 6 x 7?" in block.body_text


async def test_an_error_result_is_shown_as_an_error(config, store, registry, workspace, qwen3_template):
    engine = tool_engine(qwen3_template, [call("read_file", path="../etc/passwd"), "I cannot read that file."])
    app = RecordingApp(config, engine, store, registry=registry)
    async with app.run_test(size=SIZE) as pilot:
        await send_and_wait(pilot, "Read /etc/passwd")
        [block] = blocks(app)
        assert block.status == "error" and block.has_class("tool-error")
        assert "outside the workspace" in block.body_text


# -- consent --------------------------------------------------------------------------------


async def test_consent_yes_runs_the_write_and_the_dialog_shows_the_diff(
    config, store, registry, workspace, qwen3_template
):
    (workspace / "notes.txt").write_text("buy milk\nbuy eggs\n")
    new = "buy milk\nbuy bread\n"
    engine = tool_engine(qwen3_template, [call("write_file", path="notes.txt", content=new), "Updated your notes."])
    app = RecordingApp(config, engine, store, registry=registry)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_consent(pilot, "Swap eggs for bread in my notes")
        preview = dialog.request.preview
        assert preview.startswith("write_file(") and "-buy eggs" in preview and "+buy bread" in preview
        assert (workspace / "notes.txt").read_text() == "buy milk\nbuy eggs\n"  # nothing runs before the answer
        await pilot.click("#consent-allow")
        await wait_until(pilot, lambda: app.recorded, "the turn to be recorded")
        await pilot.pause()
        [block] = blocks(app)
        assert block.status == "ok"
    assert (workspace / "notes.txt").read_text() == new
    [(_, record)] = turn_tool_calls(store, only_turn(store).id)
    assert record.status == "ok"


async def test_consent_no_denies_and_the_file_is_never_written(config, store, registry, workspace, qwen3_template):
    engine = tool_engine(qwen3_template, [call("write_file", path="todo.txt", content="x"), "OK, I did not write it."])
    app = RecordingApp(config, engine, store, registry=registry)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_consent(pilot, "Make a todo file")
        assert "new file todo.txt" in dialog.request.preview
        await pilot.click("#consent-deny")
        await wait_until(pilot, lambda: app.recorded, "the turn to be recorded")
        await pilot.pause()
        [block] = blocks(app)
        assert block.status == "denied" and block.has_class("tool-denied")
        assert "denied" in str(block.query_one(CollapsibleTitle).content)
    assert not (workspace / "todo.txt").exists()
    [(_, record)] = turn_tool_calls(store, only_turn(store).id)
    assert record.status == "denied"
    assert "denied" in prompt_text(engine, 1)  # the model's next step read the denial


async def test_no_do_this_instead_text_is_the_result_the_next_step_reads(
    config, store, registry, workspace, qwen3_template
):
    engine = tool_engine(qwen3_template, [call("run_shell", command="rm -rf build"), "Understood."])
    app = RecordingApp(config, engine, store, registry=registry)
    async with app.run_test(size=SIZE) as pilot:
        await open_consent(pilot, "Clean the build")
        await pilot.click("#consent-instead-button")
        box = app.screen.query_one("#consent-instead", Input)
        assert box.display and box.has_focus
        await pilot.press(*"only delete build/tmp")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.recorded, "the turn to be recorded")
        await pilot.pause()
        [block] = blocks(app)
        assert block.status == "denied" and "only delete build/tmp" in block.body_text
    [(_, record)] = turn_tool_calls(store, only_turn(store).id)
    assert record.status == "denied" and "only delete build/tmp" in record.result
    assert "only delete build/tmp" in prompt_text(engine, 1)
    assert len(engine.prompts) == 2


async def test_escape_in_the_dialog_denies_and_stops_the_reply(config, store, registry, workspace, qwen3_template):
    engine = tool_engine(qwen3_template, [call("write_file", path="a.txt", content="x"), "never served"])
    app = RecordingApp(config, engine, store, registry=registry)
    async with app.run_test(size=SIZE) as pilot:
        await open_consent(pilot, "Write a.txt")
        await pilot.press("escape")
        await wait_until(pilot, lambda: not app.busy, "the stopped turn to be recorded")
        await pilot.pause()
        assert not isinstance(app.screen, ConsentScreen)
        [block] = blocks(app)
        assert block.status == "denied"
    assert not (workspace / "a.txt").exists()
    assert len(engine.prompts) == 1  # no step after the stop
    turn = only_turn(store)
    assert turn.status == "cancelled"
    [(_, record)] = turn_tool_calls(store, turn.id)
    assert record.status == "denied"


async def test_yes_for_this_chat_is_not_asked_again_in_that_chat(
    config, store, registry, workspace, qwen3_template, monkeypatch
):
    shown_dialogs = []
    original = ConsentScreen.on_mount

    def counting(self):
        shown_dialogs.append(self.request.call.arguments["path"])
        original(self)

    monkeypatch.setattr(ConsentScreen, "on_mount", counting)
    first, second = call("write_file", path="1.txt", content="one"), call("write_file", path="2.txt", content="two")
    engine = tool_engine(qwen3_template, [first, "Wrote 1.", second, "Wrote 2."])
    app = RecordingApp(config, engine, store, registry=registry)
    async with app.run_test(size=SIZE) as pilot:
        await open_consent(pilot, "Write 1.txt")
        await pilot.click("#consent-allow_chat")
        await wait_until(pilot, lambda: len(app.recorded) == 1, "the first turn")
        await send_and_wait(pilot, "Write 2.txt")
    assert shown_dialogs == ["1.txt"]
    assert (workspace / "2.txt").read_text() == "two"


async def test_dialog_buttons_are_the_four_answers(config, store, registry, workspace, qwen3_template):
    engine = tool_engine(qwen3_template, [call("run_shell", command="ls"), "Done."])
    app = RecordingApp(config, engine, store, registry=registry)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_consent(pilot, "List the files with ls")
        labels = [str(b.label) for b in dialog.query(Button)]
        assert labels == ["Yes", "Yes for this chat", "No", "No, do this instead…"]
        assert dialog.request.preview == 'run_shell({\n  "command": "ls"\n})'
        await pilot.click("#consent-deny")
        await wait_until(pilot, lambda: app.recorded, "the turn to be recorded")


async def test_keys_typed_as_the_dialog_opens_cannot_answer_it(
    config, store, registry, workspace, qwen3_template, monkeypatch
):
    """Finding: "I an…" typed while the dialog opened answered "Yes for this chat", and "ok⏎" answered "Yes"."""
    # A person types keys ~0.1 s apart; the pilot on a loaded 2-core machine sometimes took over the
    # 0.5 s arming delay between two presses, so the burst stopped being a burst. The rule is the same
    # with a longer delay: keys closer together than it never answer.
    monkeypatch.setattr(consent, "ARM_S", 3.0)
    engine = tool_engine(qwen3_template, [call("write_file", path="a.txt", content="x"), "OK."])
    app = RecordingApp(config, engine, store, registry=registry)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, "Write a.txt")
        await wait_until(pilot, lambda: isinstance(app.screen, ConsentScreen), "the consent dialog")
        dialog = app.screen
        assert dialog.focused is not None and dialog.focused.id == "consent-deny"  # Enter alone never says yes
        for key in ["I", "space", "a", "n", "y", "o", "k", "enter", "ctrl+y"]:  # typing that was meant for the box
            await pilot.press(key)
        await pilot.pause(0.1)
        assert app.screen is dialog and not dialog.request.answered.is_set()
        await wait_until(pilot, lambda: dialog.armed, "the dialog to take answers")
        await pilot.press("a")  # a single letter is no longer "yes for this chat"
        await pilot.pause()
        assert app.screen is dialog and not dialog.request.answered.is_set()
        await wait_until(pilot, lambda: dialog.armed, "the dialog to take answers again")
        await pilot.press("enter")  # a deliberate Enter answers what has focus: No
        await wait_until(pilot, lambda: app.recorded, "the turn to be recorded")
    assert not (workspace / "a.txt").exists()
    [(_, record)] = turn_tool_calls(store, only_turn(store).id)
    assert record.status == "denied"


async def test_ctrl_y_is_yes_for_this_chat(config, store, registry, workspace, qwen3_template):
    engine = tool_engine(qwen3_template, [call("write_file", path="a.txt", content="x"), "OK."])
    app = RecordingApp(config, engine, store, registry=registry)
    async with app.run_test(size=SIZE) as pilot:
        await open_consent(pilot, "Write a.txt")
        await pilot.press("ctrl+y")
        await wait_until(pilot, lambda: app.recorded, "the turn to be recorded")
    assert (workspace / "a.txt").read_text() == "x"
    assert "write_file" in app._consents[only_turn(store).session_id].allowed


async def test_dialog_says_what_a_shell_call_can_reach(config, store, registry, workspace, qwen3_template):
    from clawdesk.tools.shell import sandbox_state

    engine = tool_engine(qwen3_template, [call("run_shell", command="env"), "Done."])
    app = RecordingApp(config, engine, store, registry=registry)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_consent(pilot, "Show the environment")
        reach = str(dialog.query_one("#consent-reach").render())
        assert "Environment: HOME, LANG, LOGNAME, PATH" in reach and str(workspace) in reach
        assert ("SANDBOXED" if sandbox_state()[0] else "NO SANDBOX") in reach
        await pilot.click("#consent-deny")
        await wait_until(pilot, lambda: app.recorded, "the turn to be recorded")


async def test_control_characters_in_the_preview_are_shown_escaped(config, store, registry, workspace, qwen3_template):
    (workspace / "log.txt").write_text("plain\n\x1b[2J\x1b]0;pwned\x07\n")
    engine = tool_engine(qwen3_template, [call("edit_file", path="log.txt", old_text="plain", new_text="x"), "OK."])
    app = RecordingApp(config, engine, store, registry=registry)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_consent(pilot, "Edit the log")
        assert "\x1b" not in dialog.request.preview and "\\x1b[2J" in dialog.request.preview
        await pilot.click("#consent-deny")
        await wait_until(pilot, lambda: app.recorded, "the turn to be recorded")


@pytest.mark.parametrize("error", [RecursionError("too deep"), MemoryError(), OSError(5, "I/O error")])
async def test_the_app_survives_a_turn_worker_error_of_any_kind(config, store, registry, qwen3_template, error):
    """Finding: a worker exception that is not a ClawDeskError ended the whole app (Textual's exit_on_error)."""
    engine = tool_engine(qwen3_template, ["never served"])
    app = RecordingApp(config, engine, store, registry=registry)

    def explode(*args, **kwargs):
        raise error

    app.service.run_turn = explode
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, "Hello there")
        await wait_until(pilot, lambda: not app.busy, "the failed turn to end")
        await pilot.pause()
        assert app.is_running
        assert any(type(error).__name__ in text for text, severity in app.notes if severity == "error")
        assert app.chat_input.text == "Hello there"  # what the user wrote is kept


# -- status ---------------------------------------------------------------------------------


async def test_status_bar_tools_field(config, store, registry, qwen3_template):
    demo = ScriptedEngine(["Hi."], name="smollm2-135m")  # ChatML without tools, like the demo model
    app = RecordingApp(config, demo, store, registry=registry)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.status_bar.extra_fields["tools"] == NEEDS_TOOL_MODEL
        await send_and_wait(pilot, "Hello")  # a plain turn: one step (its answer), no blocks
        assert blocks(app) == [] and [s.idx for s in list_steps(store, only_turn(store).id)] == [0]

    app = RecordingApp(config, tool_engine(qwen3_template, ["Hi."]), store, registry=registry)
    async with app.run_test(size=SIZE) as pilot:
        n = len(registry.specs())
        await wait_until(pilot, lambda: "tools" in app.status_bar.extra_fields, "the tools status")
        assert app.status_bar.extra_fields["tools"] == f"{n} tools" and n >= 10

    app = RecordingApp(config, tool_engine(qwen3_template, ["Hi."]), store)  # no registry: no field
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "tools" not in app.status_bar.extra_fields


# -- helpers --------------------------------------------------------------------------------


def test_streamed_tool_calls_are_hidden_and_the_buffer_restarts_per_step():
    assert hide_tool_calls('Let me look.\n<tool_call>\n{"name": "read') == "Let me look."
    assert hide_tool_calls("Let me look.\n<tool_c") == "Let me look."
    assert hide_tool_calls("a < b") == "a < b"
    buffer = ReplyBuffer()
    from clawdesk.engine import Delta

    assert buffer.push(Delta(text="step one", thinking=False, n_tokens=2))
    buffer.reset()
    buffer.push(Delta(text="step two", thinking=False, n_tokens=2))
    assert buffer.take().raw == "step two"
    assert call_summary("run_shell", {"command": "ls   -la\nx"}) == "run_shell ls -la x"
    assert call_summary("current_time", {}) == "current_time"


async def test_what_i_learned_lists_tool_steps_with_their_votes(config, store, registry, workspace, qwen3_template):
    (workspace / "a.txt").write_text("alpha")
    engine = tool_engine(qwen3_template, [call("read_file", path="a.txt"), "It says alpha."])
    app = RecordingApp(config, engine, store, registry=registry)
    async with app.run_test(size=SIZE) as pilot:
        await send_and_wait(pilot, "What is in a.txt?")
    turn = only_turn(store)
    first = list_steps(store, turn.id)[0]
    assert step_lines(store, turn.id) == ["step 1: read_file → ok · not judged yet"]
    with store.transaction():
        store.db.execute(
            "INSERT INTO judgments (step_id, next_state, status, votes, hint, judged_at)"
            " VALUES (?, 'tools', 'judged', ?, ?, ?)",
            [first.id, json.dumps([1, 1, -1]), None, "2026-01-01T00:00:00"],
        )
    assert step_lines(store, turn.id) == ["step 1: read_file → ok · votes +1 +1 −1 (mean +0.33)"]
