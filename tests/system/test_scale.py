"""The turn log at scale: the indexes and flags of migration m006, the paged sidebar, one-row adapter lookups.

None of this times anything (bench/sec_scale.py measures). Each test pins the *shape* of a fix so that
it fails without it: the query plan uses the partial index instead of scanning every turn, the
trigger-kept flags always equal the facts they summarise (so the narrowed queries return exactly what
the unnarrowed ones did), the sidebar mounts one page of chats, and starting the app reads one adapter
row instead of every version.
"""

from __future__ import annotations

import dataclasses
import random
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clawdesk.config import Config
from clawdesk.learn.versions import AdapterVersion, list_versions, record_version
from clawdesk.store import NewTurn, Store, now_iso
from clawdesk.store.forget import forget_session, forget_turn
from clawdesk.store.judgments import (
    _JUDGEABLE,
    _NEXT,
    Judgment,
    backlog,
    drop_stale,
    pending_turns,
    save_judgment,
    set_rating,
    set_veto,
)
from clawdesk.store.judgments import forget as forget_judgment
from clawdesk.store.migrations_steps import STEP_JUDGE_DONE, STEP_SAMPLE_DONE
from clawdesk.store.samples import _ready, count_ready, ready_samples
from tests.support.bench import load_bench
from tests.support.scripted_engine import ScriptedEngine

SHA = "scale-test-sha"


def _turn(text: str = "hello", *, sha: str = SHA, status: str = "finished") -> NewTurn:
    at = now_iso()
    return NewTurn(
        user_content=text, reply_content="a reply", reply_thinking="", status=status, thinking=False,
        model_name="m", model_path="/m.gguf", model_sha256=sha, prompt_ids=[1, 2, 3], reply_ids=[4, 5],
        started_at=at, finished_at=at,
    )  # fmt: skip


def _judgment(turn_id: int, next_id: int, reward: int, hint: str | None = None) -> Judgment:
    return Judgment(
        turn_id=turn_id, next_turn_id=next_id, prompt_version="t", judge_model_name="m", judge_model_sha256=SHA,
        score_outputs=[], votes=[reward], reward=reward, hint_outputs=[], hint=hint,
        enhanced_user=None, enhanced_prompt_ids=[1, 2, 9] if hint else None, seconds=0.0,
    )  # fmt: skip


def _plan(store: Store, sql: str, params=None) -> str:
    return "\n".join(r[3] for r in store.db.execute("EXPLAIN QUERY PLAN " + sql, params or {}).fetchall())


# -- query plans: would scan every turn / session without m006 -------------------------------------------


def test_judge_queries_read_the_unjudged_index_not_every_turn(store):
    pending = f"SELECT t.id {_JUDGEABLE} AND {_NEXT} IS NOT NULL ORDER BY t.id LIMIT 1"
    for sql in (pending, f"SELECT count(*) {_JUDGEABLE}"):
        plan = _plan(store, sql)
        assert re.search(r"SCAN t USING (COVERING )?INDEX turns_unjudged", plan), plan
        assert "TEMP B-TREE" not in plan and "SCAN s\n" not in plan + "\n", plan


def test_counting_ready_samples_starts_from_the_untrained_judgments(store):
    plan = _plan(store, f"SELECT count(*) FROM ({_ready('stepwise')})", {"sha": SHA})
    assert re.search(r"SCAN j USING (COVERING )?INDEX judgments_untrained", plan), plan  # turns and tool steps
    assert "SCAN st" not in plan, plan  # no longer a second half that scans every step
    assert "SCAN t\n" not in plan + "\n" and "SCAN t USING" not in plan, plan


def test_sidebar_page_reads_the_recent_index_without_sorting(store):
    plan = _plan(store, store._SESSION_SELECT + " ORDER BY s.updated_at DESC, s.id DESC LIMIT 51")
    assert re.search(r"SCAN s USING (COVERING )?INDEX sessions_recent", plan) and "TEMP B-TREE" not in plan, plan


def test_recent_sessions_pages_newest_first(store):
    made = [store.create_session(system_prompt="s", title=f"chat {i}") for i in range(7)]
    later = (datetime.now(UTC) + timedelta(seconds=5)).isoformat(timespec="milliseconds")  # no same-ms tie
    store.add_turn(made[2].id, dataclasses.replace(_turn("bumps chat 2 to the top"), finished_at=later))
    everything = [s.id for s in store.list_sessions()]
    assert everything[0] == made[2].id
    pages = [store.recent_sessions(3, offset) for offset in (0, 3, 6)]
    assert [s.id for page in pages for s in page] == everything
    assert [len(p) for p in pages] == [3, 3, 1]
    assert store.latest_session().id == made[2].id


# -- the flags kept by triggers equal the facts, whatever writes ------------------------------------------


def _flags_match_facts(store: Store) -> None:
    wrong = store.db.execute(f"SELECT id FROM turns WHERE judge_done != ({STEP_JUDGE_DONE})").fetchall()
    assert wrong == [], "turns.judge_done disagrees with judgments, feedback and sessions"
    wrong = store.db.execute(f"SELECT step_id FROM judgments WHERE sample_done != ({STEP_SAMPLE_DONE})").fetchall()
    assert wrong == [], "judgments.sample_done disagrees with adapter_samples, the signal and the thumbs"


def _reference_pending(store: Store) -> tuple[list[int], int]:
    """What the judge queries returned before m006: the same rules with no flag and no index."""
    rows = store.db.execute(
        f"""SELECT t.id, {_NEXT} IS NOT NULL FROM turns t JOIN sessions s ON s.id = t.session_id
        LEFT JOIN feedback f ON f.turn_id = t.id
        WHERE NOT EXISTS (SELECT 1 FROM steps st JOIN judgments j ON j.step_id = st.id
                          WHERE st.turn_id = t.id AND j.next_state = 'user') AND t.learning = 1 AND s.incognito = 0
          AND t.status IN ('finished', 'length') AND coalesce(f.vetoed, 0) = 0 ORDER BY t.id"""
    ).fetchall()
    return [tid for tid, has_next in rows if has_next], sum(1 for _, has_next in rows if not has_next)


def _reference_ready(store: Store) -> list[int]:
    return _reference_ready_for(store, SHA)


def _reference_ready_for(store: Store, sha: str) -> list[int]:
    """What counting ready samples returned before m006: the same rules with no flag and no index."""
    return [
        r[0]
        for r in store.db.execute(
            """SELECT t.id FROM turns t JOIN sessions s ON s.id = t.session_id JOIN turn_tokens tt ON tt.turn_id = t.id
            JOIN steps fin ON fin.turn_id = t.id JOIN judgments j ON j.step_id = fin.id AND j.next_state = 'user'
            LEFT JOIN feedback f ON f.turn_id = t.id
            WHERE t.model_sha256 = ? AND t.learning = 1 AND s.incognito = 0 AND coalesce(f.vetoed, 0) = 0
              AND j.status = 'judged' AND fin.id NOT IN (SELECT step_id FROM adapter_samples)
              AND (coalesce(f.rating, j.reward, 0) != 0 OR j.hint IS NOT NULL) ORDER BY t.id""",
            [sha],
        )
    ]


OPS = ["turn"] * 5 + ["judge", "judge", "rejudge", "rate", "veto", "unlearn", "train", "forget", "incognito"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_narrowed_queries_answer_as_before_through_every_writer(store, tmp_path, seed):
    """Random histories through the real writers (record, judge, re-judge, thumbs, veto, unlearn, train,
    incognito on/off, forget a turn or a chat): after each step the flags equal the facts and the judge's
    and trainer's questions return exactly what the queries without flags return."""
    rng = random.Random(seed)
    sessions = [store.create_session(system_prompt="s", incognito=i == 3) for i in range(4)]
    version = 0
    for step in range(70):
        op = rng.choice(OPS)
        turn_ids = [r[0] for r in store.db.execute("SELECT id FROM turns")]
        judged = [
            r[0]
            for r in store.db.execute(
                "SELECT st.turn_id FROM judgments j JOIN steps st ON st.id = j.step_id WHERE j.status = 'judged'"
            )
        ]
        if op == "turn" or not turn_ids:
            store.set_learning(rng.random() > 0.1)
            status = "cancelled" if rng.random() < 0.1 else "finished"
            store.add_turn(
                rng.choice(sessions).id, _turn(f"message {step}", sha=rng.choice([SHA, SHA, "old"]), status=status)
            )
        elif op == "judge" and (pending := pending_turns(store, limit=3)):
            p = rng.choice(pending)
            save_judgment(
                store, _judgment(p.turn.id, p.next_turn_id, rng.choice([1, -1, 0]), rng.choice([None, "do X"]))
            )
        elif op == "rejudge" and judged:  # INSERT OR REPLACE over a judgment, maybe of a trained turn
            tid = rng.choice(judged)
            save_judgment(store, _judgment(tid, tid, rng.choice([1, -1, 0])))
        elif op == "rate":
            set_rating(store, rng.choice(turn_ids), rng.choice([1, -1, None]))
        elif op == "veto":
            set_veto(store, rng.choice(turn_ids), rng.random() < 0.7)
        elif op == "unlearn" and judged:
            forget_judgment(store, rng.choice(judged))
        elif op == "train" and (samples := ready_samples(store, SHA, limit=3)):
            version += 1
            record_version(
                store, version=version, status="ready", parent_version=None, base_name="m", base_sha256=SHA,
                path=tmp_path / f"v{version}", samples=samples, metrics={}, validation={}, note="",
                created_at=now_iso(),
            )  # fmt: skip
        elif op == "incognito":  # a chat switched to incognito (or back) after turns were recorded
            store.set_session_flags(rng.choice(sessions).id, incognito=rng.random() < 0.5)
        elif op == "forget" and rng.random() < 0.3:
            if rng.random() < 0.5:
                forget_turn(store, rng.choice(turn_ids))
            else:
                victim = rng.choice(sessions)
                forget_session(store, victim.id)
                sessions.remove(victim)
                sessions.append(store.create_session(system_prompt="s"))
        _flags_match_facts(store)
        ready_ids, waiting = _reference_pending(store)
        assert [p.turn.id for p in pending_turns(store)] == ready_ids
        assert backlog(store) == (len(ready_ids), waiting)
        assert count_ready(store, SHA) == len(_reference_ready(store))
        assert [s.turn_id for s in ready_samples(store, SHA)] == _reference_ready(store)
    waiting = _reference_pending(store)[1]
    assert drop_stale(store, 1, now=datetime.now(UTC) + timedelta(hours=2)) == waiting  # dropped: judgments too
    _flags_match_facts(store)
    assert backlog(store)[1] == _reference_pending(store)[1] == 0


def test_thumbs_on_a_judgment_without_signal_make_and_unmake_a_sample(store):
    """Reward 0 and no hint: no sample, until a thumbs gives one (the thumbs beats the judge), and none
    again once it is cleared. Through an existing feedback row too (an upsert: the update trigger)."""
    session = store.create_session(system_prompt="s")
    first, second, third = (store.add_turn(session.id, _turn(text)) for text in ("first", "second", "third"))
    save_judgment(store, _judgment(first, second, 0))
    save_judgment(store, _judgment(second, third, 0))
    assert count_ready(store, SHA) == 0
    set_rating(store, second, -1)  # a new feedback row (insert)
    assert count_ready(store, SHA) == 1 == len(_reference_ready(store))
    set_veto(store, first, False)  # a feedback row without a rating; the ratings below update it
    for rating, ready in ((1, 2), (None, 1), (-1, 2), (None, 1)):
        set_rating(store, first, rating)
        _flags_match_facts(store)
        assert count_ready(store, SHA) == ready == len(_reference_ready(store))
    with store.transaction():  # as a person with the sqlite3 shell might: the triggers keep up
        store.db.execute("DELETE FROM feedback")
    _flags_match_facts(store)
    assert count_ready(store, SHA) == 0


def test_the_benchmark_log_is_consistent_with_the_real_queries(store):
    """bench/sec_scale.py bulk-inserts its log: the triggers must have kept the flags, and the judge and the
    trainer must find the backlog and the untrained samples it means to leave (else it times empty work)."""
    sec_scale = load_bench("sec_scale")
    wrote = sec_scale.build(store, 1000)
    assert wrote["turns"] == store.count_turns() == 1000 and wrote["sessions"] == len(store.list_sessions())
    _flags_match_facts(store)
    ready_ids, waiting = _reference_pending(store)
    assert 0 < len(ready_ids) < sec_scale.BACKLOG and [p.turn.id for p in pending_turns(store)] == ready_ids
    assert backlog(store) == (len(ready_ids), waiting)
    ready = count_ready(store, sec_scale.BASE_SHA)
    assert ready == sec_scale.UNTRAINED and ready == len(_reference_ready_for(store, sec_scale.BASE_SHA))


def test_upgrading_a_log_fills_the_flags(tmp_path):
    """A data dir from before m006 gets the flags from what it holds (otherwise its backlog would look
    empty-or-everything after the upgrade)."""
    from clawdesk.store.db import open_database
    from clawdesk.store.migrations import MIGRATIONS

    path = tmp_path / "old.db"
    db = open_database(path, migrate=False)
    MIGRATIONS.apply(db, stop_before="m006_scale")
    db.execute("INSERT INTO sessions VALUES (1, 't', 'a', 'a', 0, 1, 's')")
    for tid in (1, 2, 3):
        db.execute(
            "INSERT INTO turns(id, session_id, seq, user_content, reply_content, status, thinking, model_name, "
            "model_path, model_sha256, n_prompt_tokens, n_reply_tokens, started_at, finished_at) "
            "VALUES (?, 1, ?, 'u', 'r', 'finished', 0, 'm', 'p', ?, 1, 1, 'a', 'a')",
            [tid, tid, SHA],
        )
        db.execute("INSERT INTO turn_tokens VALUES (?, x'01000000', x'02000000')", [tid])
    db.execute(
        "INSERT INTO judgments(turn_id, status, next_turn_id, reward, judged_at) VALUES (1, 'judged', 2, 1, 'a')"
    )
    db.execute(
        "INSERT INTO judgments(turn_id, status, next_turn_id, reward, judged_at) VALUES (2, 'judged', 3, 1, 'a')"
    )
    db.execute("INSERT INTO adapters VALUES (1, 'ready', NULL, 'm', ?, 'p', 1, '{}', '{}', '', 'a')", [SHA])
    db.execute("INSERT INTO adapter_samples VALUES (1, 1, 1.0, 0)")
    db.conn.commit()
    db.conn.close()
    store = Store.open(path)  # migrates
    try:
        _flags_match_facts(store)
        assert [r[0] for r in store.db.execute("SELECT id FROM turns WHERE judge_done = 1 ORDER BY id")] == [1, 2]
        assert count_ready(store, SHA) == 1  # turn 2: judged, not trained; turn 1 was trained on
        assert backlog(store) == (0, 1)  # turn 3 waits for a next message
    finally:
        store.close()


# -- adapters: one row, not every version -----------------------------------------------------------------


def test_start_up_adapter_lookups_read_one_row_not_every_version(store, monkeypatch):
    from clawdesk.reload import ACTIVE_KEY, previous_ready, trained_since_choice

    def made_at(v: int) -> str:
        return f"2026-01-01T00:{v // 60:02d}:{v % 60:02d}"

    rows = [(v, "rejected" if v % 7 == 0 else "ready", SHA if v % 5 else "other", made_at(v)) for v in range(1, 301)]
    with store.transaction():
        store.db.conn.executemany(
            "INSERT INTO adapters(version, status, base_name, base_sha256, path, n_samples, metrics, validation, "
            "created_at) VALUES (?, ?, 'm', ?, 'p', 8, '{}', '{}', ?)",
            rows,
        )
    every = list_versions(store)

    def newest_ready_before(before: int | None) -> int | None:
        ok = [v.version for v in every if v.status == "ready" and v.base_sha256 == SHA]
        return max((v for v in ok if before is None or v < before), default=None)

    expected_prev = {b: newest_ready_before(b) for b in (None, 300, 150, 2, 1)}
    parsed = []
    real = AdapterVersion.from_row.__func__
    monkeypatch.setattr(AdapterVersion, "from_row", classmethod(lambda cls, row: parsed.append(1) or real(cls, row)))
    for before, want in expected_prev.items():
        assert previous_ready(store, before, SHA) == want
    assert trained_since_choice(store, SHA) == expected_prev[None]  # no choice made yet: the newest is new
    store.set_setting(ACTIVE_KEY, None)  # chosen after every version: nothing newer
    assert trained_since_choice(store, SHA) is None
    assert len(parsed) <= 2  # before: every version parsed (JSON, paths) per call, once per step back in sync()


# -- the sidebar lists a page of chats ----------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_sidebar_mounts_one_page_and_lists_older_chats_on_request(tmp_path: Path, anyio_backend):
    from clawdesk.ui.app import SIDEBAR_PAGE, ClawDeskApp
    from clawdesk.ui.widgets import MoreSessions, SessionItem

    config = Config(home=tmp_path)
    store = Store.open(config.db_path)
    n = SIDEBAR_PAGE * 2 + 7
    with store.transaction():
        store.db.conn.executemany(
            "INSERT INTO sessions(title, created_at, updated_at, incognito, thinking, system_prompt) "
            "VALUES (?, ?, ?, 0, 1, 's')",
            [(f"chat {i}", f"2026-01-01T00:00:{i:03d}", f"2026-01-01T00:00:{i:03d}") for i in range(n)],
        )
    newest_first = [s.id for s in store.list_sessions()]
    app = ClawDeskApp(config, ScriptedEngine(), store)
    try:
        async with app.run_test(size=(100, 32)) as pilot:
            listing = app.session_list

            def ids() -> list[int]:
                return [item.session.id for item in listing.query(SessionItem)]

            assert ids() == newest_first[:SIDEBAR_PAGE]
            assert len(listing.query(MoreSessions)) == 1 and isinstance(listing.children[-1], MoreSessions)
            for shown in (2 * SIDEBAR_PAGE, n):
                listing.focus()
                listing.index = len(listing.children) - 1
                await pilot.press("enter")
                await pilot.pause()
                assert ids() == newest_first[:shown]
                assert app.session is None  # listing more chats opens none of them
            assert not listing.query(MoreSessions)  # everything is listed now
    finally:
        store.close()
