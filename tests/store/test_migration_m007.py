"""A database written by main before m007 (commit 60390de) opens with the new code with everything intact.

The fixture ``tests/fixtures/old_main_60390de.db`` and its manifest were written by the old code
itself (``tests/fixtures/make_old_db.py``, which also runs here to regenerate them). The manifest is
what the old code's reads returned; the same reads, now on the step-keyed tables, must return the
same sessions, turns, judgments, votes, hints, vetoes, thumbs, sample-used marks, adapter versions,
notes and training samples.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from clawdesk.store import Store, now_iso
from clawdesk.store.integrity import pending_migrations
from clawdesk.store.judgments import Judgment, pending_turns, save_judgment
from clawdesk.store.samples import count_ready, ready_samples
from clawdesk.store.steps import list_steps
from clawdesk.store.versions import record_version, version_samples

FIXTURES = Path(__file__).parents[1] / "fixtures"
_spec = importlib.util.spec_from_file_location("make_old_db", FIXTURES / "make_old_db.py")
make_old_db = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_old_db)
OLD_DB = FIXTURES / make_old_db.OLD_DB
OLD_TABLES = {"step_judgments", "adapter_step_samples"}


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "home" / "clawdesk.db"
    dst.parent.mkdir()
    shutil.copyfile(src, dst)
    return dst


def _norm(value):
    return json.loads(json.dumps(value, sort_keys=True))


def _tables(db: Path) -> set[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


def _known(new, old):
    """``new`` with only the dict keys ``old`` has: a field added later (``Sample.memory``, m009) is not a change."""
    if isinstance(new, dict) and isinstance(old, dict):
        return {k: _known(v, old[k]) for k, v in new.items() if k in old}
    if isinstance(new, list) and isinstance(old, list) and len(new) == len(old):
        return [_known(n, o) for n, o in zip(new, old, strict=True)]
    return new


def assert_intact(db: Path, old: dict) -> dict:
    """Open ``db`` with the new code (migrating it) and compare every read with the old code's ``old``."""
    assert _tables(db) >= OLD_TABLES and "m007_step_keyed_learning" not in old["migrations"]  # really old
    new = _norm(make_old_db.read_manifest(db))
    assert new["migrations"][: len(old["migrations"]) + 1] == [*old["migrations"], "m007_step_keyed_learning"]
    assert not OLD_TABLES & _tables(db)
    # Read identically, whatever the tables are keyed by now.
    same = (
        "sessions", "turns", "step_summaries", "trained_on", "feedback", "judged", "reward_counts", "backlog",
        "step_backlog", "pending_turns", "pending_steps", "versions", "version_samples", "active_adapter",
        "learning_enabled", "notes", "ready_samples", "count_ready", "heldout", "labelled", "model_sha",
    )  # fmt: skip
    for key in same:
        assert _known(new[key], old[key]) == old[key], key
    assert len(old["turns"]) == 17 and len(old["sessions"]) == 5 and len(old["versions"]) == 3
    # Judgments: every column the old rows had (votes, hints, teacher ids, sample_done...), now keyed by step.
    for turn_id, row in old["judgments"].items():
        if row is None:
            assert new["judgments"][turn_id] is None, turn_id
        else:
            assert {k: new["judgments"][turn_id][k] for k in row} == row, turn_id
            assert new["judgments"][turn_id]["next_state"] == "user"
    for step_id, row in old["step_judgments"].items():
        if row is None:
            assert new["step_judgments"][step_id] is None, step_id
        else:
            assert {k: new["step_judgments"][step_id][k] for k in row} == row, step_id
    # Steps: an agent turn's are unchanged (same ids, same calls); a plain turn now has its answer as step 0.
    for turn_id, steps in old["steps"].items():
        turn = old["turns"][turn_id]
        if steps:
            assert new["steps"][turn_id] == steps, turn_id
            for step in steps:
                assert new["tool_calls"][str(step["id"])] == old["tool_calls"][str(step["id"])]
            continue
        (step,) = new["steps"][turn_id]
        assert step["idx"] == 0 and [step["prompt_ids"], step["reply_ids"]] == turn["tokens"], turn_id
        assert (step["reply_content"], step["status"], step["started_at"]) == (
            turn["reply_content"], turn["status"], turn["started_at"],
        )  # fmt: skip
        assert new["tool_calls"][str(step["id"])] == [] and new["step_judgments"][str(step["id"])] is None
    return new


def test_the_committed_old_database_opens_with_everything_intact(tmp_path):
    old = json.loads(OLD_DB.with_suffix(".json").read_text())
    db = _copy(OLD_DB, tmp_path)
    assert_intact(db, old)
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()


def _dump(db: Path) -> list:
    conn = sqlite3.connect(db)
    try:
        schema = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
        tables = [name for kind, name, _ in schema if kind == "table" and not name.startswith(("notes_fts", "sqlite_"))]
        rows = [(name, conn.execute(f"SELECT * FROM {name} ORDER BY rowid").fetchall()) for name in tables]
        return [schema, rows]
    finally:
        conn.close()


def test_opening_the_migrated_database_again_changes_nothing(tmp_path):
    db = _copy(OLD_DB, tmp_path)
    with Store.open(db) as st:
        assert pending_migrations(st) == []
    first = _dump(db)
    for _ in range(2):
        with Store.open(db) as st:
            assert pending_migrations(st) == []
        assert _dump(db) == first


def test_after_migrating_the_log_judges_and_trains_on_as_before(tmp_path):
    old = json.loads(OLD_DB.with_suffix(".json").read_text())
    db = _copy(OLD_DB, tmp_path)
    with Store.open(db) as st:
        sha = old["base_sha256"]
        batch = ready_samples(st, sha)
        assert [(s.turn_id, s.step_id) for s in batch] == [
            (s["turn_id"], s["step_id"]) for s in old["ready_samples"]["stepwise"]
        ]
        assert any(s.step_id is not None for s in batch) and any(s.step_id is None for s in batch)
        record_version(
            st, version=4, status="ready", parent_version=3, base_name="fixture-base", base_sha256=sha,
            path=tmp_path / "v4", samples=batch, metrics={}, validation={}, note="after m007", created_at=now_iso(),
        )  # fmt: skip
        assert count_ready(st, sha) == 0 and ready_samples(st, sha) == []
        assert [s["turn_id"] for s in version_samples(st, 4)] == sorted({s.turn_id for s in batch if s.step_id is None})
        # The judge's queue still works: the one waiting turn is judged and leaves it.
        (pending,) = pending_turns(st)
        assert pending.turn.id == old["pending_turns"][0]
        votes = dict(prompt_version="t", judge_model_name="j", judge_model_sha256="j", score_outputs=["1"], votes=[1])
        save_judgment(
            st, Judgment(turn_id=pending.turn.id, next_turn_id=pending.next_turn_id, reward=1, hint_outputs=[],
                         hint=None, enhanced_user=None, enhanced_prompt_ids=None, seconds=0.0, **votes),
        )  # fmt: skip
        assert pending_turns(st) == [] and count_ready(st, sha) == 1
        # A new plain turn is a one-step turn, like the migrated ones.
        turn_id = st.add_turn(pending.turn.session_id, _new_turn(sha))
        (step,) = list_steps(st, turn_id)
        assert (step.idx, step.prompt_ids, step.reply_ids) == (0, [1, 2], [3])


def _new_turn(sha: str):
    from clawdesk.store import NewTurn

    at = now_iso()
    return NewTurn(
        user_content="new", reply_content="reply", reply_thinking="", status="finished", thinking=False,
        model_name="fixture-base", model_path="/m.gguf", model_sha256=sha, prompt_ids=[1, 2], reply_ids=[3],
        started_at=at, finished_at=at,
    )  # fmt: skip


def test_the_generator_rewrites_the_fixture_with_the_old_code(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is needed to extract the old code")
    repo = FIXTURES.parent.parent
    known = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{make_old_db.OLD_COMMIT}^{{commit}}"])
    if known.returncode != 0:
        pytest.skip(f"commit {make_old_db.OLD_COMMIT} is not in this clone (shallow?); `git fetch --unshallow`")
    out = tmp_path / "fresh"
    subprocess.run([sys.executable, str(FIXTURES / "make_old_db.py"), "--out", str(out)], check=True, cwd=repo)
    fresh = json.loads((out / make_old_db.OLD_DB).with_suffix(".json").read_text())
    committed = json.loads(OLD_DB.with_suffix(".json").read_text())
    assert fresh.keys() == committed.keys() and fresh["ready_samples"] == committed["ready_samples"]
    assert_intact(_copy(out / make_old_db.OLD_DB, tmp_path), fresh)
