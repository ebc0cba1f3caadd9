"""Concurrency on one data dir: separate processes writing, judging and training-reading one SQLite log.

The soak is about the database, not the models: the chat writer records synthetic turns, the judge
writer saves synthetic judgments and the trainer reader takes ready samples and records versions
that mark them used, all through the real :class:`~clawdesk.store.Store` at full speed. Each
process counts what it wrote and every "database is locked" it met; the test compares those counts
with what is in the DB. Then three real ``clawdesk ask`` processes share one data dir.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from clawdesk.learn.samples import count_ready
from clawdesk.store import Store

SHA = "soak-sha"
TURNS = 3000  # the chat writer's turns, PER_SESSION to a session
PER_SESSION = 10
BATCH = 8

SOAK_CHILD = r"""
import json, random, sqlite3, sys, time
from pathlib import Path
from clawdesk.errors import StoreError
from clawdesk.store import NewTurn, Store, now_iso
from clawdesk.store.judgments import Judgment, pending_turns, save_judgment
from clawdesk.learn.samples import ready_samples
from clawdesk.learn.versions import record_version

role, db, done_dir, turns, per_session, batch, sha = sys.argv[1:8]
turns, per_session, batch, done_dir = int(turns), int(per_session), int(batch), Path(done_dir)
store = Store.open(Path(db))
stats = {"role": role, "locked": 0, "other_errors": [], "written": 0, "reads": 0, "ids": []}
started = time.monotonic()


def attempt(fn):
    # Count a locked DB instead of dying on it; anything else is a failure the test reports.
    while True:
        try:
            return fn()
        except (StoreError, sqlite3.OperationalError) as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                stats["other_errors"].append(str(exc))
                raise
            stats["locked"] += 1


def finished(name):
    return (done_dir / name).exists()


if role == "chat":
    rng = random.Random(0)
    session = None
    for i in range(turns):
        if i % per_session == 0:
            session = attempt(lambda: store.create_session(system_prompt="soak"))
        at = now_iso()
        turn = NewTurn(
            user_content=f"message {i}", reply_content=f"reply {i} " * 20, reply_thinking="", status="finished",
            thinking=False, model_name="soak", model_path="/soak.gguf", model_sha256=sha,
            prompt_ids=[rng.randrange(1000) for _ in range(200)], reply_ids=[rng.randrange(1000) for _ in range(60)],
            started_at=at, finished_at=at,
        )
        stats["ids"].append(attempt(lambda: store.add_turn(session.id, turn)))
        stats["written"] += 1
elif role == "judge":
    while True:
        writer_done = finished("chat")
        pending = attempt(lambda: pending_turns(store, limit=10))
        stats["reads"] += 1
        if not pending:
            if writer_done:
                break
            time.sleep(0.005)
            continue
        for p in pending:
            j = Judgment(
                turn_id=p.turn.id, next_turn_id=p.next_turn_id, prompt_version="soak", judge_model_name="j",
                judge_model_sha256="j", score_outputs=["x"] * 3, votes=[1, 1, -1], reward=(1, -1)[p.turn.id % 2],
                hint_outputs=[], hint=None, enhanced_user=None, enhanced_prompt_ids=None, seconds=0.0,
            )
            attempt(lambda: save_judgment(store, j))
            stats["ids"].append(p.turn.id)
            stats["written"] += 1
else:  # trainer reader
    version = 0
    while True:
        judge_done = finished("judge")
        ready = attempt(lambda: ready_samples(store, sha, limit=batch))
        stats["reads"] += 1
        if len(ready) < batch:
            if judge_done:
                break
            time.sleep(0.005)
            continue
        version += 1
        attempt(lambda: record_version(
            store, version=version, status="ready", parent_version=version - 1 or None, base_name="soak",
            base_sha256=sha, path=Path(f"/soak/v{version}"), samples=ready, metrics={}, validation={}, note="",
            created_at=now_iso()))
        stats["ids"].extend(s.turn_id for s in ready)
        stats["written"] += 1
stats["seconds"] = time.monotonic() - started
store.close()
(done_dir / role).write_text("")
print(json.dumps(stats), flush=True)
"""


def _spawn(role: str, db: Path, done: Path) -> subprocess.Popen:
    args = [role, str(db), str(done), str(TURNS), str(PER_SESSION), str(BATCH), SHA]
    return subprocess.Popen(
        [sys.executable, "-c", SOAK_CHILD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_writer_judge_and_trainer_processes_share_one_db_without_locks_or_lost_rows(home):
    home.mkdir()
    db = home / "clawdesk.db"
    Store.open(db).close()  # created and migrated once, as the app does before starting its workers
    done = home / "done"
    done.mkdir()
    started = time.monotonic()
    procs = {role: _spawn(role, db, done) for role in ("chat", "judge", "trainer")}
    stats = {}
    for role, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{role} failed:\n{err[-3000:]}"
        stats[role] = json.loads(out.strip().splitlines()[-1])
    seconds = time.monotonic() - started
    chat, judge, trainer = stats["chat"], stats["judge"], stats["trainer"]
    print(
        f"soak: {chat['written']} turns, {judge['written']} judgments, {trainer['reads']} sample reads, "
        f"{trainer['written']} versions ({len(trainer['ids'])} samples), locked errors "
        f"{chat['locked']}/{judge['locked']}/{trainer['locked']}, {seconds:.1f} s"
    )

    assert [s["locked"] for s in stats.values()] == [0, 0, 0]
    assert [s["other_errors"] for s in stats.values()] == [[], [], []]
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        turn_ids = [r[0] for r in conn.execute("SELECT id FROM turns ORDER BY id")]
        by_turn = "SELECT st.turn_id FROM {} x JOIN steps st ON st.id = x.step_id {} ORDER BY st.turn_id"
        judged = [r[0] for r in conn.execute(by_turn.format("judgments", "WHERE x.status = 'judged'"))]
        used = [r[0] for r in conn.execute(by_turn.format("adapter_samples", ""))]
        n_versions = conn.execute("SELECT count(*) FROM adapters").fetchone()[0]
        seqs = conn.execute("SELECT count(*), count(DISTINCT session_id || '/' || seq) FROM turns").fetchone()
        tokens = conn.execute("SELECT count(*) FROM turn_tokens").fetchone()[0]
    finally:
        conn.close()
    # Nothing lost, nothing twice: every process's report matches the DB.
    assert chat["written"] == TURNS and sorted(chat["ids"]) == turn_ids and tokens == TURNS and seqs == (TURNS, TURNS)
    expected_judged = TURNS - TURNS // PER_SESSION  # each session's last turn never gets a next message
    assert len(judged) == expected_judged and sorted(judge["ids"]) == judged
    assert n_versions == trainer["written"] and sorted(trainer["ids"]) == used and len(set(used)) == len(used)
    assert len(used) == expected_judged // BATCH * BATCH  # every full batch was read and marked used once
    store = Store.open(db)
    try:
        assert count_ready(store, SHA) == expected_judged - len(used)
    finally:
        store.close()


OPEN_CHILD = """
import sys, time
from pathlib import Path
from clawdesk.store import Store

print("ready", flush=True)
go = Path(sys.argv[2])
while not go.exists():  # a start line: every process opens the new DB at the same moment
    time.sleep(0.001)
Store.open(Path(sys.argv[1])).close()
print("opened", flush=True)
"""


def _migrations(db: Path) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return sorted(r[0] for r in conn.execute("SELECT name FROM _sqlite_migrations"))
    finally:
        conn.close()


def test_processes_starting_together_on_a_new_data_dir_migrate_it_once(tmp_path):
    """Two commands started at once on a fresh (or just upgraded) dir would both create the tables."""
    Store.open(tmp_path / "reference.db").close()
    expected = _migrations(tmp_path / "reference.db")
    for attempt in range(3):
        db, go = tmp_path / f"home{attempt}" / "clawdesk.db", tmp_path / f"go{attempt}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", OPEN_CHILD, str(db), str(go)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready"
        go.touch()
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0 and out.strip() == "opened", err[-2000:]
        assert _migrations(db) == expected  # each step applied once


def test_three_ask_processes_on_one_data_dir_all_succeed(home):
    home.mkdir()
    (home / "config.toml").write_text("[chat]\ntemperature = 0.0\nmax_reply_tokens = 12\n")
    questions = ["What is two plus two?", "Name a colour.", "Say hello."]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "clawdesk", "ask", "--no-think", q],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for q in questions
    ]
    results = [p.communicate(timeout=300) for p in procs]
    for proc, (out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err[-2000:]
        assert out.strip() and "error" not in err
    store = Store.open(home / "clawdesk.db")
    try:
        sessions = store.list_sessions()
        assert len(sessions) == 3 and len({s.id for s in sessions}) == 3
        by_text = {t.user_content: t for s in sessions for t in store.list_turns(s.id)}
        assert sorted(by_text) == sorted(questions)
        assert len({t.session_id for t in by_text.values()}) == 3 and all(t.seq == 1 for t in by_text.values())
        assert all(t.n_reply_tokens > 0 for t in by_text.values())
    finally:
        store.close()
