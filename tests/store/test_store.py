import os
import sqlite3
import stat
import threading

import pytest

from clawdesk.errors import DataDirError, NotFoundError, StoreError
from clawdesk.store import NewTurn, Store, now_iso
from clawdesk.store.db import open_database


def _turn(user="hi", reply="hello", status="finished", prompt=(1, 2, 3), reply_ids=(4, 5)) -> NewTurn:
    at = now_iso()
    return NewTurn(
        user_content=user, reply_content=reply, reply_thinking="", status=status, thinking=False,
        model_name="m", model_path="/m.gguf", model_sha256="abc", prompt_ids=list(prompt),
        reply_ids=list(reply_ids), started_at=at, finished_at=at,
    )  # fmt: skip


def test_db_is_private_wal_and_migrated(store, config):
    mode = stat.S_IMODE(os.stat(config.db_path).st_mode)
    assert mode == 0o600
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    applied = [r["name"] for r in store.db.query("select name from _sqlite_migrations order by id")]
    assert applied[0] == "m001_foundation"
    # Reopening applies nothing twice.
    again = Store.open(config.db_path)
    assert [r["name"] for r in again.db.query("select name from _sqlite_migrations order by id")] == applied
    again.close()


def test_turn_roundtrip_tokens_and_title(store):
    s = store.create_session(system_prompt="sys")
    big_prompt = list(range(5000))
    tid = store.add_turn(s.id, _turn(user="What is the tallest mountain on Earth?", prompt=big_prompt))
    store.add_turn(s.id, _turn(user="and second?", status="cancelled"))
    turns = store.list_turns(s.id)
    assert [t.seq for t in turns] == [1, 2]
    assert turns[1].status == "cancelled"
    assert store.turn_tokens(tid) == (big_prompt, [4, 5])
    assert turns[0].n_prompt_tokens == 5000
    session = store.get_session(s.id)
    assert session.title == "What is the tallest mountain on Earth?"
    assert session.n_turns == 2
    roles = [
        r["role"] for r in store.db.query("select role from messages where session_id = ? order by seq, part", [s.id])
    ]
    assert roles == ["user", "assistant", "user", "assistant"]


def test_sessions_rename_flags_delete(store):
    a = store.create_session(system_prompt="s", incognito=True)
    b = store.create_session(system_prompt="s")
    store.rename_session(a.id, "  Trip   plans ")
    store.set_session_flags(b.id, thinking=False)
    store.add_turn(b.id, _turn())
    assert store.get_session(a.id).title == "Trip plans"
    assert store.get_session(a.id).incognito is True
    assert store.get_session(b.id).thinking is False
    assert store.latest_session().id == b.id
    store.delete_session(b.id)
    assert [s.id for s in store.list_sessions()] == [a.id]
    assert store.db.execute("select count(*) from turn_tokens").fetchone()[0] == 0  # cascaded
    with pytest.raises(NotFoundError):
        store.get_session(b.id)
    with pytest.raises(StoreError):
        store.rename_session(a.id, "   ")


def test_learning_setting_persists(config):
    st = Store.open(config.db_path)
    assert st.learning_enabled is True
    st.set_learning(False)
    st.close()
    st2 = Store.open(config.db_path)
    assert st2.learning_enabled is False
    st2.close()


def test_failed_turn_write_is_atomic(store):
    s = store.create_session(system_prompt="s")
    store.add_turn(s.id, _turn())
    # A constraint violation inside the transaction (status CHECK) must leave nothing behind.
    bad = _turn(status="finished")
    object.__setattr__(bad, "status", "exploded")
    with pytest.raises(ValueError):
        store.add_turn(s.id, bad)
    store.db.execute("DROP TABLE turn_tokens")  # make the second insert fail after the first succeeded
    with pytest.raises(StoreError):
        store.add_turn(s.id, _turn(user="lost?"))
    assert [t.user_content for t in store.list_turns(s.id)] == ["hi"]


def test_corrupted_db_is_reported_and_left_untouched(tmp_path):
    path = tmp_path / "clawdesk.db"
    junk = os.urandom(8192)
    path.write_bytes(junk)
    with pytest.raises(StoreError) as info:
        open_database(path)
    assert str(path) in str(info.value) and "Move it aside" in str(info.value)
    assert path.read_bytes() == junk


def test_unwritable_data_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DataDirError) as info:
        Store.open(blocker / "sub" / "clawdesk.db")
    assert "--data-dir" in str(info.value)


def test_one_connection_per_thread(config, store):
    s = store.create_session(system_prompt="s")
    errors: list[BaseException] = []

    def writer():
        try:
            own = Store.open(config.db_path)
            own.add_turn(s.id, _turn(user="from thread"))
            own.close()
        except BaseException as exc:  # surfaced to the assertion below
            errors.append(exc)

    t = threading.Thread(target=writer)
    t.start()
    t.join()
    assert not errors
    assert [x.user_content for x in store.list_turns(s.id)] == ["from thread"]
    # The main thread's connection refuses use from another thread (one connection per thread).
    with pytest.raises(sqlite3.ProgrammingError):
        _cross_thread(store)


def _cross_thread(store):
    box: list[BaseException] = []

    def use():
        try:
            store.db.execute("select 1").fetchone()
        except BaseException as exc:
            box.append(exc)

    t = threading.Thread(target=use)
    t.start()
    t.join()
    raise box[0]
