"""Scale section of the benchmark suite: the turn log's everyday queries at 1k / 10k / 100k recorded turns.

Owns generating a realistic data dir fast (the real ``open_store`` and migrations, then bulk inserts into
the store's own tables in one transaction) and timing, at each size, what the chat does all the time:

- ``record``: recording one new turn (``Store.add_turn``, as the turn runner does after every reply);
- ``count_ready``: counting the samples ready to train (``learn.samples.count_ready``: the status bar's
  "batch n/8" after every turn and the trainer's start);
- ``pending``: the judge service's question "which turn next?" (``pending_turns(limit=1)``, asked per turn);
- ``backlog`` / ``drop_stale``: the judge loop's other two queries per round (the status bar's counts);
- ``sessions``: what the sidebar shows (``Store.recent_sessions``, one page; after every reply too);
- ``app_start``: the Textual app (``App.run_test()``, headless, real demo engine, its learning controller
  started) from opening the store to its first screen with the sidebar filled and the learning counts read.

Each op is the median of several runs after one warm-up call (the first call is kept in ``raw``). Run it
with the suite (``python bench/run.py --only scale``) or alone (``python bench/sec_scale.py [--quick]``).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (1_000, 10_000)
TURNS_PER_SESSION = 10
BACKLOG = 100  # the newest turns are not judged yet: the judge keeps up, so this does not grow with the log
UNTRAINED = 40  # the newest judged turns are not trained on yet (a few batches' worth)
BASE_SHA = "bench-base-sha256"  # the served model; the oldest 10% of turns came from an earlier model
OLD_SHA = "bench-old-sha256"
DB_OPS = ("record", "count_ready", "pending", "backlog", "drop_stale", "sessions")
GOAL_MS = 50.0
GOAL_APP_S = 2.0


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds")


def _ids(rng: random.Random, lo: int, hi: int) -> list[int]:
    return [rng.randrange(49152) for _ in range(rng.randrange(lo, hi))]


def build(store, n_turns: int, *, seed: int = 0) -> dict[str, int]:
    """Fill an empty, migrated store with ``n_turns`` turns in sessions of ~10; returns what it wrote.

    Realistic shares: 5% of sessions recorded with learning OFF, 3% incognito, 2% of replies cancelled;
    every turn older than the newest ``BACKLOG`` is judged (or dropped: no next message), 50/40/10% reward
    +1/-1/0 with a hint on a third of the -1s; 2% thumbs, 0.5% vetoed; every judged turn with a signal is
    trained on by an adapter version of 8 samples except the newest ``UNTRAINED``.
    """
    from clawdesk.store.tokens import pack_ids

    rng = random.Random(seed)
    now = datetime.now(UTC)
    start = now - timedelta(seconds=30 * n_turns + 60)
    sessions, turns, tokens, judgments, feedback, samples, adapters = [], [], [], [], [], [], []
    prompt_blob = [pack_ids(_ids(rng, 64, 256)) for _ in range(16)]  # reused: blob size, not content, matters
    reply_blob = [pack_ids(_ids(rng, 16, 64)) for _ in range(16)]
    teacher_blob = pack_ids(_ids(rng, 80, 280))
    turn_id, session_id, to_train = 0, 0, {BASE_SHA: [], OLD_SHA: []}
    while turn_id < n_turns:
        session_id += 1
        length = min(n_turns - turn_id, max(1, int(rng.gauss(TURNS_PER_SESSION, 3))))
        incognito, learning = session_id % 33 == 5, int(session_id % 20 != 7)
        first_at = start + timedelta(seconds=30 * turn_id)
        for seq in range(1, length + 1):
            turn_id += 1
            at = start + timedelta(seconds=30 * turn_id)
            sha = OLD_SHA if turn_id <= n_turns // 10 else BASE_SHA
            status = "cancelled" if rng.random() < 0.02 else "finished"
            pb, rb = prompt_blob[turn_id % 16], reply_blob[(turn_id * 7) % 16]
            turns.append((
                turn_id, session_id, seq, f"question {turn_id}: how would you phrase this paragraph more plainly?",
                "Here is a plainer version of the paragraph, keeping your points in order. " * 3, "", status, 1,
                "bench-model", "/models/bench.gguf", sha, None, len(pb) // 4, len(rb) // 4, 0, 250.0, 40.0,
                _iso(at - timedelta(seconds=5)), _iso(at), learning,
            ))  # fmt: skip
            tokens.append((turn_id, pb, rb))  # also its step 0 (a plain turn is a one-step turn), id = turn id
            vetoed = rng.random() < 0.005
            rating = rng.choice((1, -1)) if rng.random() < 0.02 else None
            if vetoed or rating is not None:
                feedback.append((turn_id, rating, int(vetoed), _iso(at)))
            if turn_id > n_turns - BACKLOG or not learning or incognito or status != "finished" or vetoed:
                continue
            if seq == length:  # the session's last reply never got a next message
                judgments.append((turn_id, "dropped", None, None, None, None, None, "no next message", _iso(at)))
                continue
            reward = rng.choices((1, -1, 0), (50, 40, 10))[0]
            hint = "Say it in two sentences." if reward == -1 and rng.random() < 1 / 3 else None
            judgments.append((
                turn_id, "judged", turn_id + 1, reward, hint, teacher_blob if hint else None,
                "[1, 1, -1]", "", _iso(at + timedelta(seconds=40)),
            ))  # fmt: skip
            if (rating if rating is not None else reward) != 0 or hint:
                to_train[sha].append((turn_id, float(rating if rating is not None else reward), int(hint is not None)))
        sessions.append((
            session_id, f"Chat {session_id}", _iso(first_at), _iso(at), int(incognito), 1, "You are helpful.",
        ))  # fmt: skip
    version = 0
    for sha, rows in to_train.items():
        keep = rows[: max(0, len(rows) - UNTRAINED)] if sha == BASE_SHA else rows
        for i in range(0, len(keep), 8):
            version += 1
            batch = keep[i : i + 8]
            made_at = _iso(start + timedelta(seconds=30 * batch[-1][0] + 60))  # trained once its batch was judged
            adapters.append((version, "ready", version - 1 or None, "bench", sha, f"/adapters/v{version}", 8, "{}",
                             "{}", made_at))  # fmt: skip
            samples += [(version, tid, reward, has_hint) for tid, reward, has_hint in batch]
    ex = store.db.conn.executemany
    with store.transaction():
        ex("INSERT INTO sessions(id, title, created_at, updated_at, incognito, thinking, system_prompt) "
           "VALUES (?, ?, ?, ?, ?, ?, ?)", sessions)  # fmt: skip
        ex(
            "INSERT INTO turns(id, session_id, seq, user_content, reply_content, reply_thinking, status, thinking, "
            "model_name, model_path, model_sha256, adapter_version, n_prompt_tokens, n_reply_tokens, dropped_turns, "
            "latency_ms, tokens_per_s, started_at, finished_at, learning) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            turns,
        )
        ex("INSERT INTO turn_tokens(turn_id, prompt_ids, reply_ids) VALUES (?, ?, ?)", tokens)
        store.db.execute(  # judgments and samples are keyed by step (m007): each turn's step 0, same id
            "INSERT INTO steps(id, turn_id, idx, prompt_ids, reply_ids, reply_content, status, started_at, finished_at)"
            " SELECT t.id, t.id, 0, tt.prompt_ids, tt.reply_ids, t.reply_content, t.status, t.started_at, t.finished_at"
            " FROM turns t JOIN turn_tokens tt ON tt.turn_id = t.id"
        )
        ex(
            "INSERT INTO judgments(step_id, next_state, status, next_turn_id, reward, hint, enhanced_prompt_ids, votes,"
            " note, judged_at) VALUES (?, 'user', ?, ?, ?, ?, ?, ?, ?, ?)",
            judgments,
        )
        ex("INSERT INTO feedback(turn_id, rating, vetoed, updated_at) VALUES (?, ?, ?, ?)", feedback)
        ex(
            "INSERT INTO adapters(version, status, parent_version, base_name, base_sha256, path, n_samples, metrics, "
            "validation, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            adapters,
        )
        ex("INSERT INTO adapter_samples(version, step_id, reward, has_hint) VALUES (?, ?, ?, ?)", samples)
    # `clawdesk adapters off` after the last version: the adapter files are not generated, so none is served.
    store.set_setting("active_adapter", None)

    return {"turns": n_turns, "sessions": session_id, "judgments": len(judgments), "adapter_samples": len(samples)}


def _new_turn(rng: random.Random):
    from clawdesk.store import NewTurn, now_iso

    at = now_iso()
    return NewTurn(
        user_content="and now a shorter one, please", reply_content="Sure: a shorter one. " * 8, reply_thinking="",
        status="finished", thinking=False, model_name="bench-model", model_path="/models/bench.gguf",
        model_sha256=BASE_SHA, prompt_ids=_ids(rng, 400, 600), reply_ids=_ids(rng, 30, 80), started_at=at,
        finished_at=at, latency_ms=250.0, tokens_per_s=40.0,
    )  # fmt: skip


def _timed(fn: Callable[[], object], runs: int) -> dict[str, float]:
    first = time.perf_counter()
    fn()
    first = (time.perf_counter() - first) * 1000
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return {"median_ms": statistics.median(times), "first_ms": first, "max_ms": max(times)}


def measure_ops(store, runs: int) -> dict[str, dict[str, float]]:
    """Every DB op once to warm up, then ``runs`` times; medians in ms."""
    from clawdesk.learn.samples import count_ready
    from clawdesk.store.judgments import backlog, drop_stale, pending_turns
    from clawdesk.ui.app import SIDEBAR_PAGE

    rng = random.Random(1)
    session_id = store.latest_session().id  # the chat in use: new turns go on at its end
    ops = {
        "record": lambda: store.add_turn(session_id, _new_turn(rng)),
        "count_ready": lambda: count_ready(store, BASE_SHA),
        "pending": lambda: pending_turns(store, limit=1),
        "backlog": lambda: backlog(store),
        "drop_stale": lambda: drop_stale(store, 72),
        "sessions": lambda: store.recent_sessions(SIDEBAR_PAGE + 1),  # as ClawDeskApp.refresh_sessions asks
    }
    return {name: _timed(fn, runs) for name, fn in ops.items()}


async def _start_app(config, engine) -> tuple[float, int]:
    from clawdesk.runtime import open_store
    from clawdesk.ui.app import ClawDeskApp

    t = time.perf_counter()
    store = open_store(config)
    try:
        app = ClawDeskApp(config, engine, store, learning=True)
        async with app.run_test(size=(100, 32)) as pilot:
            await pilot.pause()  # the first screen has been composed, mounted and rendered
            elapsed = time.perf_counter() - t
            n_items = len(app.session_list.children)
            if app.learning is None or n_items == 0:
                raise RuntimeError("the app started without its sidebar or learning controller")
    finally:
        store.close()
    return elapsed, n_items


def measure_app_start(config, engine, runs: int) -> dict[str, float]:
    times, items = [], 0
    for _ in range(runs):
        elapsed, items = asyncio.run(_start_app(config, engine))
        times.append(elapsed)
    return {"median_s": statistics.median(times), "max_s": max(times), "sidebar_items": items}


def _load_engine(home: Path):
    from clawdesk.engine import Engine
    from clawdesk.models import DEMO_NAME, resolve_model

    return Engine.load(resolve_model(DEMO_NAME, home / "models", explicit=True), sha256=BASE_SHA, n_ctx=1024)


def measure(quick: bool, log: Callable[[str], None]) -> dict[str, dict]:
    from clawdesk.config import Config, TrainConfig
    from clawdesk.runtime import open_store

    sizes = QUICK_SIZES if quick else SIZES
    runs, app_runs = (5, 2) if quick else (9, 3)
    per_size: dict[int, dict] = {}
    with tempfile.TemporaryDirectory(prefix="clawdesk-scale-") as tmp:
        engine = _load_engine(Path(tmp))
        try:
            for n in sizes:
                # batch_size above the ready count: the app must not launch a trainer while we time its start.
                config = Config(home=Path(tmp) / f"home-{n}", train=TrainConfig(batch_size=1024))
                store = open_store(config)
                try:
                    t = time.perf_counter()
                    wrote = build(store, n)
                    build_s = time.perf_counter() - t
                    log(f"scale: {n:,} turns generated in {build_s:.1f} s; timing the queries")
                    ops = measure_ops(store, runs)
                    # The app starts with learning OFF: ON, its judge would start a model call on the backlog that
                    # races the measurement and delays every exit; the learning counts are read at start either way.
                    store.set_learning(False)
                finally:
                    store.close()
                log(f"scale: {n:,} turns: starting the app")
                app = measure_app_start(config, engine, app_runs)
                size_mb = config.db_path.stat().st_size / 2**20
                per_size[n] = {"build_s": build_s, "db_mb": size_mb, **wrote, "ops": ops, "app_start": app}
                log(f"scale: {n:,} turns: " + ", ".join(f"{k} {v['median_ms']:.2f} ms" for k, v in ops.items())
                    + f", app start {app['median_s']:.2f} s")  # fmt: skip
        finally:
            engine.close()
    return _results(per_size, runs, app_runs)


def _results(per_size: dict[int, dict], runs: int, app_runs: int) -> dict[str, dict]:
    sizes = sorted(per_size)
    top, low = sizes[-1], sizes[0]
    table = {op: {str(n): per_size[n]["ops"][op]["median_ms"] for n in sizes} for op in DB_OPS}
    table["app_start_ms"] = {str(n): per_size[n]["app_start"]["median_s"] * 1000 for n in sizes}
    growth = {op: (row[str(top)] / row[str(low)] if row[str(low)] > 0 else None) for op, row in table.items()}
    worst = max(DB_OPS, key=lambda op: table[op][str(top)])
    raw = {
        "at_turns": top,
        "worst_op": worst,
        "median_ms": table,
        f"growth_{top // 1000}k_over_{low // 1000}k": growth,
        "log_n_ratio": _log_ratio(top, low),
        "runs_per_op": runs,
        "app_runs": app_runs,
        "sizes": {str(n): {k: v for k, v in per_size[n].items() if k not in ("ops", "app_start")} for n in sizes},
        "detail": {str(n): {"ops": per_size[n]["ops"], "app_start": per_size[n]["app_start"]} for n in sizes},
        "note": "no agent tool steps in the generated log (the demo model cannot call tools); the app starts "
        "with learning OFF (no judge model calls racing it) but reads the learning counts as with it ON",
    }
    return {
        "record_ms": {
            "value": table["record"][str(top)],
            "unit": "ms",
            "goal": f"<= {GOAL_MS:g}",
            "raw": {"at_turns": top, "by_size": table["record"], "growth": growth["record"]},
        },
        "scale": {"value": table[worst][str(top)], "unit": "ms", "goal": f"<= {GOAL_MS:g}", "raw": raw},
        "app_start_s": {
            "value": per_size[top]["app_start"]["median_s"],
            "unit": "s",
            "goal": f"<= {GOAL_APP_S:g}",
            "raw": {"at_turns": top, "by_size_ms": table["app_start_ms"], "growth": growth["app_start_ms"]},
        },
    }


def _log_ratio(top: int, low: int) -> float:
    """How much log n grows between the sizes: the most an O(log n) op's time may grow."""
    import math

    return math.log(top) / math.log(low)


if __name__ == "__main__":
    import json

    result = measure("--quick" in sys.argv, lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps(result, indent=2))
