"""`clawdesk forget` and the chat's delete: the text is gone from the SQLite files, the rest intact.

Real SQLite files in a throwaway data dir; the "running app" is a second real connection. A marker
string is written into every place a turn's words can live (message, reply, thinking, title, the
served token ids, a judgment's hint) and the raw bytes of clawdesk.db, -wal and -shm are searched.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from clawdesk.cli import main
from clawdesk.errors import NotFoundError, StoreError
from clawdesk.store import NewTurn, Store, now_iso
from clawdesk.store.forget import STEP_TABLES, TURN_TABLES, compact, forget_session, forget_turn, trained_on
from clawdesk.store.judgments import Judgment, get_judgment, list_judged, pending_turns, save_judgment
from clawdesk.store.steps import NewStep, NewToolCall, add_agent_turn, list_steps, tool_calls
from clawdesk.store.tokens import unpack_ids

MARKER = b"ZQXJ-FORGET-ME-0042"  # 20 bytes: 5 little-endian int32 token ids spell it too


def marker_ids(marker: bytes = MARKER) -> list[int]:
    padded = marker + b"\0" * (-len(marker) % 4)
    return [int.from_bytes(padded[i : i + 4], "little", signed=True) for i in range(0, len(padded), 4)]


def _turn(text: str, *, prompt_ids: list[int] | None = None) -> NewTurn:
    at = now_iso()
    return NewTurn(
        user_content=text, reply_content=f"reply to {text}", reply_thinking=f"thinking about {text}",
        status="finished", thinking=True, model_name="smollm2-135m", model_path="/m.gguf", model_sha256="test-sha",
        prompt_ids=prompt_ids or [1, 2, 3], reply_ids=[4, 5], started_at=at, finished_at=at,
    )  # fmt: skip


def _agent_turn(store: Store, session_id: int, text: str, *, tool_result: str, step_hint: str) -> int:
    """A turn of the agent loop: a read_file step whose result is ``tool_result``, then the answer."""
    at = now_iso()
    read = NewToolCall("read_file", {"path": "notes.txt"}, "<tool_call>…</tool_call>", tool_result, "ok", 0.01)
    steps = [
        NewStep([1, 2], [9], "<tool_call>…</tool_call>", "", "finished", at, at, calls=(read,)),
        NewStep([1, 2, 9, 3], [4, 5], f"reply to {text}", "", "finished", at, at),
    ]
    turn_id, step_ids = add_agent_turn(store, session_id, _turn(text, prompt_ids=[1, 2, 9, 3]), steps)
    with store.transaction():
        store.db.execute(
            "INSERT INTO judgments(step_id, next_state, status, hint, judged_at) VALUES (?, 'tools', 'judged', ?, ?)",
            [step_ids[0], step_hint, at],
        )
    return turn_id


def _judge(store: Store, turn_id: int, next_turn_id: int, hint: str | None = None) -> None:
    save_judgment(
        store,
        Judgment(
            turn_id=turn_id, next_turn_id=next_turn_id, prompt_version="test", judge_model_name="m",
            judge_model_sha256="test-sha", score_outputs=["x"], votes=[1], reward=1, hint_outputs=[hint or ""],
            hint=hint, enhanced_user=hint, enhanced_prompt_ids=[7, 8] if hint else None, seconds=0.1,
        ),
    )  # fmt: skip


def _version(store: Store, n: int, turn_ids: list[int], parent: int | None = None) -> None:
    with store.transaction():
        store.db.execute(
            "INSERT INTO adapters(version, status, parent_version, base_name, base_sha256, path, n_samples, metrics,"
            " validation, created_at) VALUES (?, 'ready', ?, 'smollm2-135m', 'test-sha', ?, ?, '{}', '{}', ?)",
            [n, parent, f"/nowhere/v{n}", len(turn_ids), now_iso()],
        )
        for t in turn_ids:
            store.db.execute(  # a turn's own sample is keyed by its final step
                "INSERT INTO adapter_samples(version, step_id, reward, has_hint)"
                " SELECT ?, id, 1, 0 FROM steps WHERE turn_id = ? ORDER BY idx DESC LIMIT 1",
                [n, t],
            )


def raw_bytes(db_path: Path) -> bytes:
    parts = [Path(f"{db_path}{suffix}") for suffix in ("", "-wal", "-shm")]
    return b"".join(p.read_bytes() for p in parts if p.exists())


def integrity(db_path: Path) -> str:
    conn = sqlite3.connect(db_path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


@pytest.fixture
def two_chats(store):
    """Chat A full of the marker (3 turns, judged, trained on), chat B without it (2 turns, judged, trained on)."""
    secret = MARKER.decode()
    a = store.create_session(system_prompt="sys")
    a_ids = [
        store.add_turn(a.id, _turn(f"{secret} first", prompt_ids=marker_ids())),
        store.add_turn(a.id, _turn(f"tell me more {secret}")),
        _agent_turn(store, a.id, "and then?", tool_result=f"notes.txt: {secret}", step_hint=f"read {secret}"),
    ]
    _judge(store, a_ids[0], a_ids[1], hint=f"say it like {secret}")
    b = store.create_session(system_prompt="sys")
    b_ids = [store.add_turn(b.id, _turn("keep this one")), store.add_turn(b.id, _turn("and this"))]
    _judge(store, b_ids[0], b_ids[1], hint="shorter please")
    _version(store, 1, [b_ids[0]])
    _version(store, 2, [a_ids[0]], parent=1)
    _version(store, 3, [], parent=2)  # continued from v2: carries what v2 learned
    store.set_setting("active_adapter", 3)
    return a.id, a_ids, b.id, b_ids


def test_forget_session_leaves_no_text_in_the_files(store, config, two_chats):
    a, a_ids, b, b_ids = two_chats
    app = Store.open(config.db_path)  # a running chat: another connection on the same file
    try:
        assert [s.id for s in app.list_sessions()] == [b, a]
        assert MARKER in raw_bytes(config.db_path)  # the check below can fail
        a_steps = [st.id for t in a_ids for st in list_steps(store, t)]

        result = forget_session(store, a)

        assert MARKER not in raw_bytes(config.db_path)
        assert Path(f"{config.db_path}-wal").stat().st_size == 0  # checkpointed and truncated
        assert result.compacted and (result.sessions, result.turns, result.scrubbed) == (1, 3, 0)
        assert integrity(config.db_path) == "ok"
        for table, column in TURN_TABLES:
            n = store.db.execute(f"SELECT count(*) FROM {table} WHERE {column} IN (?, ?, ?)", a_ids).fetchone()[0]
            assert n == 0, table
        # The turns' steps went, and with them the tool call (whose result held the marker), judgments and samples.
        marks = ",".join("?" * len(a_steps))
        for table in STEP_TABLES:
            n = store.db.execute(f"SELECT count(*) FROM {table} WHERE step_id IN ({marks})", a_steps).fetchone()[0]
            assert n == 0, table
        assert store.db.execute("SELECT count(*) FROM tool_calls").fetchone() == (0,)
        # The other chat is untouched, and the running app still reads it.
        assert [s.id for s in app.list_sessions()] == [b]
        assert [t.id for t in app.list_turns(b)] == b_ids
        assert app.turn_tokens(b_ids[0]) == ([1, 2, 3], [4, 5])
        assert get_judgment(app, b_ids[0])["hint"] == "shorter please"
        with pytest.raises(NotFoundError):
            store.get_session(a)
    finally:
        app.close()
    # v2 was trained on chat A and v3 continued from it; v1 (chat B only) is the one to go back to.
    assert result.versions == (2, 3) and result.active == 3 and result.safe_version == 1
    advice = result.advice()
    assert "v2, v3" in advice and "serves v3" in advice
    assert "`clawdesk adapters use 1`" in advice and "`clawdesk adapters off`" in advice


def test_forget_turn_takes_its_words_from_neighbours_and_title(store, config, two_chats):
    _, a_ids, b, b_ids = two_chats
    first, middle = b"ZQXJ-FIRST-TURN-0007", b"ZQXJ-MIDDLE-TURN-0099"
    s = store.create_session(system_prompt="sys")
    ids = [
        store.add_turn(s.id, _turn(f"{first.decode()} hello")),  # the chat's title comes from this message
        store.add_turn(s.id, _turn(f"{middle.decode()} please")),
        store.add_turn(s.id, _turn("and then?", prompt_ids=marker_ids(middle))),  # saw turn 2 as history
    ]
    _judge(store, ids[0], ids[1], hint=f"like {middle.decode()}")  # a hint is made of the *next* message
    _judge(store, ids[1], ids[2])
    assert middle in raw_bytes(config.db_path) and first.decode() in store.get_session(s.id).title

    result = forget_turn(store, ids[1])

    assert middle not in raw_bytes(config.db_path)
    assert integrity(config.db_path) == "ok"
    assert [t.id for t in store.list_turns(s.id)] == [ids[0], ids[2]]  # the others stay readable...
    assert (result.turns, result.scrubbed, result.versions) == (1, 1, ())
    assert get_judgment(store, ids[0]) is None  # its hint quoted the forgotten message
    # ...but turn 3 is never judged or trained on again: its served prompt held the forgotten turn.
    assert store.db.execute("SELECT count(*) FROM turn_tokens WHERE turn_id = ?", [ids[2]]).fetchone() == (0,)
    assert store.db.execute("SELECT vetoed FROM feedback WHERE turn_id = ?", [ids[2]]).fetchone() == (1,)
    assert ids[2] not in [p.turn.id for p in pending_turns(store)]
    assert sorted(j.turn_id for j in list_judged(store)) == [a_ids[0], b_ids[0]]  # the other chats' stay
    assert [t.id for t in store.list_turns(b)] == b_ids

    # Forgetting the first message retitles the chat after the message that is now first.
    forget_turn(store, ids[0])
    assert first not in raw_bytes(config.db_path)
    assert store.get_session(s.id).title == "and then?"
    with pytest.raises(NotFoundError, match="no turn with id 424242"):
        forget_turn(store, 424242)


def test_forget_turn_scrubs_later_agent_steps_and_trained_on_sees_step_samples(store):
    s = store.create_session(system_prompt="sys")
    first = store.add_turn(s.id, _turn("forget me"))
    later = _agent_turn(store, s.id, "and then?", tool_result="3 lines", step_hint="read it whole")
    step_ids = [st.id for st in list_steps(store, later)]
    _version(store, 1, [])
    with store.transaction():
        store.db.execute("INSERT INTO adapter_samples(version, step_id, reward, has_hint) VALUES (1, ?, 1, 0)",
                         [step_ids[0]])  # fmt: skip
    assert trained_on(store, [later]) == [1] and trained_on(store, [first]) == []

    forget_turn(store, first)  # the later turn's steps were served with the forgotten turn in their prompts

    steps = list_steps(store, later)
    assert [st.id for st in steps] == step_ids and [st.prompt_ids for st in steps] == [[], []]
    assert [c.result for c in tool_calls(store, step_ids[0])] == ["3 lines"]  # still readable in the chat
    assert store.db.execute("SELECT count(*) FROM judgments").fetchone() == (0,)


def test_trained_on_follows_continued_versions(store, two_chats):
    _, a_ids, _, b_ids = two_chats
    assert trained_on(store, [b_ids[0]]) == [1, 2, 3]  # v1 trained on it, v2 and v3 continued from v1
    assert trained_on(store, [a_ids[0]]) == [2, 3]
    assert trained_on(store, [b_ids[1]]) == []


def test_forget_while_another_process_holds_the_write_lock(store, config, two_chats):
    a, a_ids, _, _ = two_chats
    other = sqlite3.connect(config.db_path)
    other.execute("BEGIN IMMEDIATE")  # e.g. a training run committing a version
    store.db.execute("PRAGMA busy_timeout=50")  # the real timeout is 10 s; the test need not wait that long
    try:
        with pytest.raises(StoreError, match=r"nothing was deleted: .* is busy; another ClawDesk process"):
            forget_session(store, a)
    finally:
        other.rollback()
        other.close()
    assert [t.id for t in store.list_turns(a)] == a_ids  # untouched
    assert not store.db.conn.in_transaction
    assert forget_session(store, a).compacted  # and it works once the lock is gone


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_forget(home, store, two_chats, capsys, monkeypatch):
    a = two_chats[0]
    store.close()
    code, out, err = run(capsys, "forget", "--session", "424242")
    assert code == 1 and err.startswith("clawdesk: error: no session with id 424242")
    code, out, err = run(capsys, "forget", "--turn", "424242")
    assert code == 1 and "no turn with id 424242" in err and "Traceback" not in err
    code, out, err = run(capsys, "forget", "--session", str(a))
    assert code == 0, err
    assert f"deleted session {a} and its 3 turn(s)" in out and "neither the database nor its WAL" in out
    assert "v2, v3" in out and "clawdesk adapters use 1" in out

    # --all refuses without a terminal unless --yes, and deletes nothing.
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    code, out, err = run(capsys, "forget", "--all")
    assert code == 2 and "add --yes" in err
    check = Store.open(home / "clawdesk.db")
    assert check.count_turns() == 2
    check.close()
    # In a terminal it asks, and "no" keeps everything.
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    assert run(capsys, "forget", "--all")[0] == 1
    code, out, err = run(capsys, "forget", "--all", "--yes")
    assert code == 0 and "deleted 1 session(s) and 2 turn(s)" in out
    check = Store.open(home / "clawdesk.db")
    try:
        assert check.count_turns() == 0 and check.list_sessions() == []
        assert check.db.execute("SELECT count(*) FROM adapters").fetchone() == (3,)  # versions are not deleted
        assert check.get_setting("active_adapter") == 3
    finally:
        check.close()
    assert integrity(home / "clawdesk.db") == "ok"
    assert run(capsys, "forget", "--compact")[0] == 0


def test_forget_needs_exactly_one_target(home, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["forget"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        main(["forget", "--session", "1", "--all"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_forget_tokens_helper_matches_store_packing():
    # The marker-as-token-ids trick above only proves something if packing keeps the bytes.
    from clawdesk.store.tokens import pack_ids

    assert pack_ids(marker_ids()).startswith(MARKER)
    assert unpack_ids(pack_ids(marker_ids())) == marker_ids()


@pytest.mark.anyio
async def test_chat_delete_goes_through_forget(config, store, two_chats):
    """The TUI's "Delete chat" (session list, `delete`, confirm) erases the text from the files too."""
    from clawdesk.ui.app import ClawDeskApp
    from clawdesk.ui.screens import ConfirmScreen
    from tests.support.scripted_engine import ScriptedEngine

    a, _, b, _ = two_chats
    notes: list[str] = []

    class App(ClawDeskApp):
        def notify(self, message, **kwargs):
            notes.append(str(message))
            super().notify(message, **kwargs)

    app = App(config, ScriptedEngine(["Sure."]), store, session_id=b)
    async with app.run_test(size=(100, 32)) as pilot:
        await pilot.pause()
        app.session_list.focus()
        app.session_list.index = [s.id for s in store.list_sessions()].index(a)
        await pilot.press("delete")
        for _ in range(500):
            if isinstance(app.screen, ConfirmScreen):
                break
            await pilot.pause(0.01)
        await pilot.press("y")
        for _ in range(500):
            if [s.id for s in store.list_sessions()] == [b] and notes:
                break
            await pilot.pause(0.01)
    assert [s.id for s in store.list_sessions()] == [b]
    assert MARKER not in raw_bytes(config.db_path)
    assert any("v2, v3" in n and "clawdesk adapters use 1" in n for n in notes), notes


@pytest.fixture
def anyio_backend():
    return "asyncio"  # Textual runs on asyncio


def test_a_reader_holding_an_old_snapshot_is_reported_then_compact_finishes(store, config, two_chats):
    a = two_chats[0]
    reader = sqlite3.connect(config.db_path)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM turns").fetchone()  # a snapshot from before the delete
    store.db.execute("PRAGMA busy_timeout=50")
    try:
        result = forget_session(store, a)
    finally:
        reader.rollback()
        reader.close()
    # The rows are gone, but the checkpoint could not overwrite pages the reader might still need,
    # and the result says so instead of claiming the file is clean.
    assert not result.compacted and "clawdesk forget --compact" in result.advice()
    assert store.db.execute("SELECT count(*) FROM turns WHERE session_id = ?", [a]).fetchone() == (0,)
    assert MARKER in raw_bytes(config.db_path)
    assert compact(store)
    assert MARKER not in raw_bytes(config.db_path)
    # A writer holding the lock makes compaction fail with a message saying what to do.
    other = sqlite3.connect(config.db_path)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match=r"could not be compacted .*`clawdesk forget --compact`"):
            compact(store)
    finally:
        other.rollback()
        other.close()
