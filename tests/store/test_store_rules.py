"""The store's shared data rules and its newer owners of SQL (rules, versions, integrity), on real SQLite logs.

The learnable-turn rule and the tool-step rule are written once (clawdesk/store/rules.py); these
tests read them through every query that uses them, so breaking the rule breaks all of them here.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from clawdesk.errors import StoreError
from clawdesk.store import NewTurn, Store, now_iso
from clawdesk.store.integrity import (
    count_chats,
    database_problem,
    has_table,
    integrity_problems,
    open_read_only,
    pending_migrations,
    rebase_adapter_paths,
)
from clawdesk.store.judgments import Judgment, backlog, pending_turns, save_judgment, set_veto
from clawdesk.store.samples import Sample, count_ready, labelled_turns, ready_samples
from clawdesk.store.step_judgments import StepJudgment, pending_steps, save_step_judgment, step_summaries
from clawdesk.store.steps import NewStep, NewToolCall, add_agent_turn, trail_rows
from clawdesk.store.versions import (
    active_adapter,
    active_adapter_chosen_at,
    highest_version,
    previous_ready,
    record_version,
    set_active_adapter,
)

SHA = "base-sha"
READ = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n</tool_call>'


@pytest.fixture
def st(tmp_path):
    with Store.open(tmp_path / "clawdesk.db") as store:
        yield store


def _turn(user: str, prompt=(1, 2, 3), reply=(4, 5)) -> NewTurn:
    at = now_iso()
    return NewTurn(
        user_content=user, reply_content="answer", reply_thinking="", status="finished", thinking=False,
        model_name="base", model_path="/m.gguf", model_sha256=SHA, prompt_ids=list(prompt), reply_ids=list(reply),
        started_at=at, finished_at=at,
    )  # fmt: skip


def _step(prompt, reply, calls=()) -> NewStep:
    at = now_iso()
    return NewStep(list(prompt), list(reply), READ if calls else "done", "", "finished", at, at, calls=tuple(calls))


def _agent_turn(st: Store, session_id: int) -> tuple[int, list[int]]:
    """Two tool steps (one call each) and the final answer."""
    call = NewToolCall("read_file", {"path": "a.txt"}, READ, "hello", "ok", 0.01)
    steps = [_step((1,), (2,), [call]), _step((1, 2, 3), (4,), [call]), _step((1, 2, 3, 4, 5), (6,))]
    return add_agent_turn(st, session_id, _turn("read a.txt", prompt=(1, 2, 3, 4, 5), reply=(6,)), steps)


def _judge(st: Store, turn_id: int, reward: int) -> None:
    save_judgment(
        st,
        Judgment(
            turn_id=turn_id, next_turn_id=turn_id, prompt_version="t", judge_model_name="j", judge_model_sha256="j",
            score_outputs=[], votes=[reward], reward=reward, hint_outputs=[], hint=None, enhanced_user=None,
            enhanced_prompt_ids=None, seconds=0.0,
        ),
    )  # fmt: skip


def _chat(st: Store, *, incognito=False, learning=True, veto=False) -> int:
    """A session whose first turn is an agent turn followed by the user's next message; returns that turn's id."""
    st.set_learning(learning)
    session = st.create_session(system_prompt="sys", incognito=incognito)
    turn_id, _ = _agent_turn(st, session.id)
    st.add_turn(session.id, _turn("thanks"))
    st.set_learning(True)
    if veto:
        set_veto(st, turn_id)
    return turn_id


def test_one_learnable_rule_for_the_judge_queue_the_samples_and_the_export(st):
    ok = _chat(st)
    _chat(st, incognito=True), _chat(st, learning=False)
    vetoed = _chat(st, veto=True)
    # The judge's queues: turns (with a next message) and tool steps.
    assert [p.turn.id for p in pending_turns(st)] == [ok]
    assert backlog(st) == (1, 2)  # the "thanks" of the plain and the vetoed chat wait for a next message
    assert {p.turn.id for p in pending_steps(st)} == {ok}
    # Judged anyway (as an older version might have): still never a sample nor exported.
    for turn_id in range(1, 9):
        _judge(st, turn_id, 1)
    for step_id in (1, 2, 5, 6, 9, 10, 13, 14):  # every tool step of every chat (each "thanks" is a step too)
        save_step_judgment(st, StepJudgment(step_id, "t", "j", "j", [""], [1], [], None, None, 0.0))
    learnable = [ok, ok + 1, vetoed + 1]  # the vetoed chat's next message was not vetoed
    assert [s.turn_id for s in ready_samples(st, SHA) if s.step_id is None] == learnable
    assert [(s.turn_id, s.step_id) for s in ready_samples(st, SHA)][:3] == [(ok, 1), (ok, 2), (ok, None)]
    assert {s.turn_id for s in ready_samples(st, SHA)} == set(learnable)
    assert count_ready(st, SHA) == len(ready_samples(st, SHA)) == 5  # 3 turns, the plain chat's 2 tool steps
    assert [r["id"] for r in labelled_turns(st)] == learnable


def test_the_final_step_is_the_turn_and_only_earlier_steps_are_tool_steps(st):
    session = st.create_session(system_prompt="sys")
    turn_id, step_ids = _agent_turn(st, session.id)
    st.add_turn(session.id, _turn("thanks"))
    assert [p.step.id for p in pending_steps(st)] == step_ids[:2]
    assert [r["id"] for r in step_summaries(st, turn_id)] == step_ids[:2]
    assert [r["calls"] for r in step_summaries(st, turn_id)] == ["read_file → ok"] * 2
    rows = trail_rows(st, [turn_id])
    assert [(r["step_id"], bool(r["final"])) for r in rows] == [(step_ids[0], False), (step_ids[1], False),
                                                                (step_ids[2], True)]  # fmt: skip
    assert trail_rows(st, []) == []


def test_store_is_a_context_manager_that_closes(tmp_path):
    with Store.open(tmp_path / "clawdesk.db") as store:
        store.create_session(system_prompt="sys")
    with pytest.raises(sqlite3.ProgrammingError):
        store.db.execute("SELECT 1")


def test_versions_and_the_served_choice(st, tmp_path):
    assert highest_version(st) == 0 and active_adapter(st) is None and active_adapter_chosen_at(st) == ""
    session = st.create_session(system_prompt="sys")
    for n, status in ((1, "ready"), (2, "rejected"), (3, "ready")):
        turn_id = st.add_turn(session.id, _turn(f"q{n}"))
        sample = Sample(turn_id=turn_id, prompt_ids=[1], reply_ids=[2], reward=1.0, hint=None, teacher_prompt_ids=None)
        record_version(
            st, version=n, status=status, parent_version=None, base_name="base", base_sha256=SHA,
            path=tmp_path / f"v{n}", samples=[sample], metrics={}, validation={}, note="", created_at=now_iso(),
        )  # fmt: skip
    assert highest_version(st) == 3
    assert previous_ready(st, None, SHA) == 3 and previous_ready(st, 3, SHA) == 1 and previous_ready(st, 1, SHA) is None
    assert previous_ready(st, None, "other-sha") is None
    set_active_adapter(st, 3)
    assert active_adapter(st) == 3 and active_adapter_chosen_at(st) >= st.get_turn(1).finished_at
    set_active_adapter(st, None)
    assert active_adapter(st) is None


def test_database_problem_tells_sound_logs_from_damaged_and_foreign_files(tmp_path):
    good = tmp_path / "clawdesk.db"
    with Store.open(good) as store:
        store.add_turn(store.create_session(system_prompt="sys").id, _turn("hi"))
    assert database_problem(good) is None
    assert count_chats(good) == (1, 1)
    foreign = tmp_path / "other.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    assert database_problem(foreign) == "is not a ClawDesk database"
    text = tmp_path / "notes.db"
    text.write_bytes(b"just some text, no database here" * 200)
    assert "cannot be read" in database_problem(text)


def test_rebase_adapter_paths_points_rows_at_the_new_dir(tmp_path):
    db = tmp_path / "clawdesk.db"
    with Store.open(db) as store:
        turn_id = store.add_turn(store.create_session(system_prompt="sys").id, _turn("hi"))
        sample = Sample(turn_id=turn_id, prompt_ids=[1], reply_ids=[2], reward=1.0, hint=None, teacher_prompt_ids=None)
        record_version(
            store, version=1, status="ready", parent_version=None, base_name="base", base_sha256=SHA,
            path=Path("/elsewhere/adapters/v1"), samples=[sample], metrics={}, validation={}, note="",
            created_at=now_iso(),
        )  # fmt: skip
    store.close()
    rebase_adapter_paths(db, tmp_path / "adapters", {1})
    with Store.open(db) as store:
        from clawdesk.store.versions import get_version

        assert get_version(store, 1).path == tmp_path / "adapters" / "v1"


def test_read_only_view_writes_nothing_and_sees_pending_migrations(tmp_path):
    db = tmp_path / "clawdesk.db"
    with Store.open(db) as store:
        store.add_turn(store.create_session(system_prompt="sys").id, _turn("hi"))
    before = sorted(p.name for p in tmp_path.iterdir())
    with open_read_only(db) as ro:
        assert integrity_problems(ro) == [] and pending_migrations(ro) == [] and ro.count_turns() == 1
        assert has_table(ro, "adapters") and not has_table(ro, "photos")
        with pytest.raises(sqlite3.OperationalError):
            ro.db.execute("DELETE FROM turns")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no -wal/-shm left behind
    # A log from before a migration: read as it is, the step still named as pending.
    with Store.open(db) as store:
        store.db.execute("DELETE FROM _sqlite_migrations WHERE name = 'm006_scale'")
        store.db.conn.commit()
    with open_read_only(db) as ro:
        assert pending_migrations(ro) == ["m006_scale"]
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"x" * 4096)
    with pytest.raises(StoreError, match="damaged or not a ClawDesk database"):
        open_read_only(garbage)
