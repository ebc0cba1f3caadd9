"""Crash safety with real ``kill -9``, and the trainer stopped with SIGTERM or run twice at once.

Every kill is a real SIGKILL of a real process (``clawdesk ask``, ``python -m clawdesk.learn.trainer``,
a judge on the demo model) at a synchronised point: after reply bytes reached stdout, after a
progress line, or at a ``CLAWDESK_TEST_PAUSE_AT`` pause of :mod:`clawdesk.learn.versions`.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from clawdesk.config import TrainConfig
from clawdesk.engine import Engine, SamplingParams
from clawdesk.learn import versions
from clawdesk.learn.samples import count_ready
from clawdesk.learn.trainer import train
from clawdesk.models import ResolvedModel
from clawdesk.reload import AdapterSwitch
from clawdesk.store import NewTurn, Store, now_iso
from clawdesk.store.judgments import Judgment, get_judgment, pending_turns, save_judgment
from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

SHA = "tiny-sha"
VOCAB = 283  # the tiny Qwen3's vocabulary
GREEDY = SamplingParams(temperature=0.0, max_tokens=8)
WAIT = 240.0  # seconds a synchronisation point may take on a loaded 2-core machine (not a sleep)


# -- helpers --------------------------------------------------------------------------------------


class Lines:
    """Reads a child's stream line by line in a thread, so the test can wait for a line with a deadline."""

    def __init__(self, stream):
        self.seen: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream) -> None:
        for line in stream:
            self._q.put(line)
        self._q.put(None)

    def wait_for(self, predicate, timeout: float = WAIT) -> str:
        deadline = time.monotonic() + timeout
        while True:
            line = self._q.get(timeout=max(0.01, deadline - time.monotonic()))
            if line is None:
                raise AssertionError("the child closed the stream first; it said:\n" + "".join(self.seen[-30:]))
            self.seen.append(line)
            if predicate(line):
                return line


def kill9(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL


def integrity(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def add_turns(store: Store, n: int, *, seed: int, sha: str = SHA, per_session: int | None = None) -> list[int]:
    """``n`` finished turns with random token ids, ``per_session`` to a session (all in one by default)."""
    rng = random.Random(seed)
    ids, session = [], None
    for i in range(n):
        if session is None or (per_session and i % per_session == 0):
            session = store.create_session(system_prompt="sys")
        at = now_iso()
        ids.append(
            store.add_turn(
                session.id,
                NewTurn(
                    user_content=f"question {i}", reply_content=f"answer {i}", reply_thinking="", status="finished",
                    thinking=False, model_name="tiny", model_path="/tiny.gguf", model_sha256=sha,
                    prompt_ids=[rng.randrange(VOCAB) for _ in range(rng.randrange(6, 20))],
                    reply_ids=[rng.randrange(VOCAB) for _ in range(rng.randrange(3, 10))],
                    started_at=at, finished_at=at,
                ),
            )
        )  # fmt: skip
    return ids


def judged(turn_id: int, reward: int = 1, **kw) -> Judgment:
    fields = dict(
        turn_id=turn_id, next_turn_id=turn_id, prompt_version="t", judge_model_name="j", judge_model_sha256="j",
        score_outputs=[], votes=[reward] * 3, reward=reward, hint_outputs=[], hint=None, enhanced_user=None,
        enhanced_prompt_ids=None, seconds=0.0,
    )  # fmt: skip
    return Judgment(**(fields | kw))


def fill(db: Path, n: int, *, seed: int) -> list[int]:
    """``n`` judged turns with alternating rewards: ready training samples for the tiny Qwen3."""
    store = Store.open(db)
    try:
        ids = add_turns(store, n, seed=seed)
        for k, tid in enumerate(ids):
            save_judgment(store, judged(tid, reward=(1, -1)[k % 2]))
        return ids
    finally:
        store.close()


# -- 1. `clawdesk ask` killed mid-reply ------------------------------------------------------------


def _ask_config(home: Path, max_tokens: int) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f"[chat]\ntemperature = 0.0\nmax_reply_tokens = {max_tokens}\n")


def _ask(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "clawdesk", "ask", "--no-think", *args], capture_output=True, text=True, timeout=300
    )


def test_ask_killed_mid_reply_keeps_earlier_turns_and_the_next_ask_works(home):
    _ask_config(home, max_tokens=8)
    assert _ask("Hello there.").returncode == 0
    assert _ask("-c", "Name a colour.").returncode == 0
    db = home / "clawdesk.db"
    store = Store.open(db)
    before = [(t.id, t.user_content, t.reply_content, store.turn_tokens(t.id)) for t in store.list_turns(1)]
    store.close()
    assert len(before) == 2

    _ask_config(home, max_tokens=400)  # a long greedy story: still streaming when the kill lands
    proc = subprocess.Popen(
        [sys.executable, "-m", "clawdesk", "ask", "--no-think", "-c", "Write a long story about a dragon who bakes."],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        first = os.read(proc.stdout.fileno(), 64)  # blocks until the reply's first bytes were streamed
        assert first
        kill9(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()

    assert integrity(db) == "ok"
    store = Store.open(db)
    try:
        turns = store.list_turns(1)
        after = [(t.id, t.user_content, t.reply_content, store.turn_tokens(t.id)) for t in turns]
        assert after == before  # the cut reply is absent, not half-written; earlier turns untouched
        assert store.db.execute("SELECT count(*) FROM turns").fetchone()[0] == 2
        assert store.db.execute("SELECT count(*) FROM turn_tokens").fetchone()[0] == 2
    finally:
        store.close()

    _ask_config(home, max_tokens=8)
    done = _ask("-c", "Are you still there?")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() and "error" not in done.stderr
    store = Store.open(db)
    try:
        turns = store.list_turns(1)
        assert [t.seq for t in turns] == [1, 2, 3] and turns[2].user_content == "Are you still there?"
        assert turns[2].n_reply_tokens > 0
    finally:
        store.close()


# -- 2 / 4. the trainer killed, stopped, and run twice at once -------------------------------------


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_qwen3_gguf(tmp_path_factory.mktemp("tiny") / "tiny-qwen3.gguf")


@pytest.fixture
def data(tmp_path) -> dict[str, Path]:
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    # Many micro-batches (token_budget) and epochs: a step long enough that a signal sent at its
    # first micro-batch always lands inside it.
    (cfg / "config.toml").write_text(
        '[train]\nbatch_size = 4\nepochs = 6\ntoken_budget = 64\nlora_r = 4\ndevice = "cpu"\n'
    )
    return {"db": tmp_path / "clawdesk.db", "adapters": tmp_path / "adapters", "cfg": cfg}


def _trainer(data, gguf: Path, *, pause_at: str | None = None) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("CLAWDESK_TEST_PAUSE_AT", None)
    if pause_at:
        env["CLAWDESK_TEST_PAUSE_AT"] = pause_at
    cmd = [
        sys.executable, "-m", "clawdesk.learn.trainer", "--db", str(data["db"]), "--adapters", str(data["adapters"]),
        "--base", str(gguf), "--base-name", "tiny", "--base-sha", SHA, "--config-home", str(data["cfg"]),
    ]  # fmt: skip
    return subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _micro_batch(line: str) -> bool:
    msg = json.loads(line)
    return msg["phase"] == "step" and "micro-batch 1/" in msg["message"]


def _state(db: Path):
    store = Store.open(db)
    try:
        return [v.version for v in versions.list_versions(store)], count_ready(store, SHA)
    finally:
        store.close()


def test_trainer_killed_mid_step_leaves_nothing_and_the_next_run_trains_those_samples(tiny_gguf, data):
    ids = fill(data["db"], 4, seed=1)
    proc = _trainer(data, tiny_gguf)
    out = Lines(proc.stdout)
    out.wait_for(_micro_batch)
    kill9(proc)
    assert integrity(data["db"]) == "ok"
    assert _state(data["db"]) == ([], 4)  # no version listed; the killed step's samples still unused
    assert not any(p.name.startswith(("v", ".staging")) for p in data["adapters"].iterdir())
    assert (data["adapters"] / ".train.lock").exists()  # stale lock file: must not block the next run

    cfg = TrainConfig(batch_size=4, lora_r=4, device="cpu", load_in_4bit=False)
    made = train(data["db"], data["adapters"], tiny_gguf, "tiny", SHA, cfg)
    assert made == [1]
    store = Store.open(data["db"])
    try:
        assert [s["turn_id"] for s in versions.version_samples(store, 1)] == ids
    finally:
        store.close()


@pytest.mark.slow
def test_trainer_killed_before_publish_and_before_record_never_serves_a_partial_version(tiny_gguf, data):
    cfg = TrainConfig(batch_size=4, lora_r=4, device="cpu", load_in_4bit=False)
    fill(data["db"], 4, seed=2)
    assert train(data["db"], data["adapters"], tiny_gguf, "tiny", SHA, cfg) == [1]
    engine = Engine.load(ResolvedModel(name="tiny", path=tiny_gguf), sha256=SHA, n_ctx=256, n_threads=1)
    store = Store.open(data["db"])
    try:
        switch = AdapterSwitch(engine, store)
        assert switch.sync() is None and engine.adapter_version == 1
        prompt = engine.tokenize("hello there")
        served_v1 = engine.generate(prompt, GREEDY).reply_ids
        second = fill(data["db"], 4, seed=3)

        # Killed with v2's files complete in the staging dir, before the rename.
        proc = _trainer(data, tiny_gguf, pause_at="publish")
        Lines(proc.stderr).wait_for(lambda line: "clawdesk-test-pause publish" in line)
        staged = data["adapters"] / ".staging-v2"
        assert (staged / versions.ADAPTER_GGUF).is_file() and (staged / versions.METADATA_JSON).is_file()
        kill9(proc)
        assert _state(data["db"]) == ([1], 4) and not (data["adapters"] / "v2").exists()
        assert switch.sync() is None and engine.adapter_version == 1
        assert engine.generate(prompt, GREEDY).reply_ids == served_v1

        # Killed after the rename, before the adapters row: a dir without a row.
        proc = _trainer(data, tiny_gguf, pause_at="record")
        Lines(proc.stderr).wait_for(lambda line: "clawdesk-test-pause record" in line)
        assert (data["adapters"] / "v2" / versions.ADAPTER_GGUF).is_file()
        kill9(proc)
        assert integrity(data["db"]) == "ok"
        assert _state(data["db"]) == ([1], 4)  # v2 is on disk but never listed...
        assert switch.sync() is None and engine.adapter_version == 1  # ...nor served
        assert engine.generate(prompt, GREEDY).reply_ids == served_v1

        # The next run is not blocked by the stale lock or staging dir and trains on the same samples.
        assert train(data["db"], data["adapters"], tiny_gguf, "tiny", SHA, cfg) == [3]  # v2's number is skipped
        assert [s["turn_id"] for s in versions.version_samples(store, 3)] == second
        assert not [p for p in data["adapters"].iterdir() if p.name.startswith(".staging")]
        assert switch.sync() is None and engine.adapter_version == 3
        assert engine.generate(prompt, GREEDY).status in ("finished", "length")
    finally:
        store.close()
        engine.close()


def test_trainer_sigterm_mid_step_exits_cleanly_with_nothing_recorded(tiny_gguf, data):
    fill(data["db"], 4, seed=4)
    proc = _trainer(data, tiny_gguf)
    out = Lines(proc.stdout)
    out.wait_for(_micro_batch)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=WAIT) == 0
    last = json.loads(out.wait_for(lambda line: json.loads(line)["phase"] in ("done", "error")))
    assert last["phase"] == "done" and "stopped" in last["message"], last
    assert _state(data["db"]) == ([], 4)
    assert not any(p.name.startswith(("v", ".staging")) for p in data["adapters"].iterdir())


def test_second_training_run_is_refused_while_one_holds_the_lock(tiny_gguf, data):
    fill(data["db"], 4, seed=5)
    first = _trainer(data, tiny_gguf, pause_at="publish")  # holds the run lock at a known point
    try:
        Lines(first.stderr).wait_for(lambda line: "clawdesk-test-pause publish" in line)
        second = _trainer(data, tiny_gguf)
        out, _ = second.communicate(timeout=WAIT)
        assert second.returncode == 1
        line = json.loads(out.strip().splitlines()[-1])
        assert line["phase"] == "error" and line["kind"] == "TrainError"
        assert "Another training run" in line["error"] and str(data["adapters"]) in line["error"]
        first.stdin.write("\n")  # let the first run publish and record
        first.stdin.flush()
        assert first.wait(timeout=WAIT) == 0
    finally:
        if first.poll() is None:
            first.kill()
    store = Store.open(data["db"])
    try:
        assert [v.version for v in versions.list_versions(store)] == [1]
        assert store.db.execute("SELECT count(*), count(DISTINCT step_id) FROM adapter_samples").fetchone() == (4, 4)
    finally:
        store.close()


# -- 3. the judge killed while judging / saving -----------------------------------------------------

JUDGE_CHILD = """
import sys
from pathlib import Path
from clawdesk.config import JudgeConfig
from clawdesk.engine import Engine
from clawdesk.judge.runner import Judge
from clawdesk.judge.service import judge_pending
from clawdesk.models import DEMO_NAME, resolve_model
from clawdesk.store import Store

store = Store.open(Path(sys.argv[1]))
engine = Engine.load(resolve_model(DEMO_NAME, Path("/nonexistent"), explicit=True), sha256="demo", n_ctx=1024,
                     n_threads=1)
judge = Judge(engine, JudgeConfig(votes=1))  # one vote a turn: the kill is what is tested
judge_pending(store, judge, max_age_hours=72,
              on_event=lambda ev: ev.kind == "judged" and print("judged", ev.judgment.turn_id, flush=True))
print("done", flush=True)
"""

SAVER_CHILD = """
import sys
from pathlib import Path
from clawdesk.store import Store
from clawdesk.store.judgments import Judgment, pending_turns, save_judgment

store = Store.open(Path(sys.argv[1]))
for k, p in enumerate(pending_turns(store)):
    save_judgment(store, Judgment(
        turn_id=p.turn.id, next_turn_id=p.next_turn_id, prompt_version="crash", judge_model_name="j",
        judge_model_sha256="j", score_outputs=["s" * 4000] * 3, votes=[1, 1, -1], reward=1, hint_outputs=["h"] * 3,
        hint="be brief", enhanced_user="u", enhanced_prompt_ids=list(range(2000)), seconds=0.5))
    print(k + 1, flush=True)
"""


def _child(code: str, db: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )


def test_judge_killed_after_two_judgments_saves_only_complete_rows(home):
    db = home / "clawdesk.db"
    home.mkdir()
    store = Store.open(db)
    try:
        session = store.create_session(system_prompt="You are a helpful assistant.")
        talk = ["What is 2+2?", "Thanks!", "Name a fruit.", "No, a red one.", "Say hi.", "Great.", "Bye."]
        for text in talk:
            at = now_iso()
            store.add_turn(session.id, NewTurn(
                user_content=text, reply_content="Sure: here is my answer.", reply_thinking="", status="finished",
                thinking=False, model_name="demo", model_path="/demo", model_sha256="demo", prompt_ids=[1, 2],
                reply_ids=[3, 4], started_at=at, finished_at=at))  # fmt: skip
        assert len(pending_turns(store)) == 6
    finally:
        store.close()

    proc = _child(JUDGE_CHILD, db)
    out = Lines(proc.stdout)
    reported = [int(out.wait_for(lambda line: line.startswith("judged")).split()[1]) for _ in range(2)]
    kill9(proc)
    assert integrity(db) == "ok"
    store = Store.open(db)
    try:
        sql = "SELECT st.turn_id FROM judgments j JOIN steps st ON st.id = j.step_id ORDER BY st.turn_id"
        rows = [r["turn_id"] for r in store.db.query(sql)]
        assert set(reported) <= set(rows) and len(rows) <= 3  # the one in progress is absent (or whole)
        for tid in rows:
            j = get_judgment(store, tid)
            assert j["status"] == "judged" and j["reward"] in (-1, 0, 1) and j["judged_at"]
            assert len(j["votes"]) == 1 and j["next_turn_id"] == tid + 1
        assert len(pending_turns(store)) == 6 - len(rows)  # the rest is still pending, judged later
    finally:
        store.close()


def test_judgment_writer_killed_mid_save_never_leaves_half_a_row(home):
    """A tight save loop spends most of its time inside save_judgment's transaction, so kills land there."""
    db = home / "clawdesk.db"
    home.mkdir()
    store = Store.open(db)
    try:
        add_turns(store, 301, seed=7)  # 300 judgeable turns in one session
    finally:
        store.close()
    reported = 0
    for stop_after in (40, 80, 120):  # three kills, each child continues the backlog
        proc = _child(SAVER_CHILD, db)
        out = Lines(proc.stdout)
        target = stop_after - reported
        out.wait_for(lambda line, target=target: int(line) >= target)
        kill9(proc)
        reported += int(out.seen[-1])
        assert integrity(db) == "ok"
        store = Store.open(db)
        try:
            rows = list(store.db.query("SELECT st.turn_id FROM judgments j JOIN steps st ON st.id = j.step_id"))
            assert reported <= len(rows) <= reported + 1  # at most the save in flight committed unreported
            reported = len(rows)
            for r in rows:
                j = get_judgment(store, r["turn_id"])
                assert (j["votes"], j["reward"], j["hint"]) == ([1, 1, -1], 1, "be brief")
                assert j["score_outputs"] == ["s" * 4000] * 3 and j["enhanced_prompt_ids"] == list(range(2000))
        finally:
            store.close()
