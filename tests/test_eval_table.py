"""bench/eval_table.py: a score holds until the next scoring, rows read every seed, scenarios get phase lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.bench import load_bench

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "eval_table.py"


@pytest.fixture(scope="module")
def eval_table():
    return load_bench("eval_table")


def _run(seed: int, scores, *, memory: bool, phases=None, agreement=None) -> dict:
    phases = phases or [{"personas": ["p"], "start": 0, "base_score": scores[0][1], "final_score": scores[-1][1],
                         "interactions_to_target": 1 if seed == 0 else None}]  # fmt: skip
    return {
        "seed": seed, "scores": scores, "final_score": scores[-1][1],
        "interactions_to_target": 8 if seed == 0 else None, "sessions_to_effect": 2 + seed, "memory": memory,
        "score_without_memory": 0.25 * seed if memory else scores[-1][1],
        "memory_items": [{"status": "learned"}] * seed, "max_ppl_ratio": 1.01 + seed / 100,
        "kept_versions": [1, 2], "rejected_versions": [3] * seed, "judge_agreement": agreement,
        "wall_s": 100.0 * (seed + 1), "phases": phases, "retention": {},
    }  # fmt: skip


def _write(path: Path, data: dict) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "result.json").write_text(json.dumps(data), encoding="utf-8")


def test_score_at_is_the_last_point_at_or_before(eval_table):
    points = [[0, 0.0], [1, 0.5], [8, 0.75], [8, 0.25]]
    assert eval_table.score_at(points, 0) == 0.0
    assert eval_table.score_at(points, 4) == 0.5  # held since interaction 1
    assert eval_table.score_at(points, 8) == 0.25  # the later of two points at one x
    assert eval_table.score_at([[2, 1.0]], 1) is None


def test_a_seeds_row_reads_every_seed_and_the_mean(eval_table, tmp_path):
    out = tmp_path / "mem-on"
    runs = [_run(0, [[0, 0.0], [1, 1.0], [8, 0.5]], memory=True), _run(1, [[0, 0.5], [8, 1.0]], memory=True)]
    for r in runs:
        _write(out / f"seed-{r['seed']}", r)
    _write(out, {"scores": [[0, 0.25], [1, 0.75], [8, 0.75]]})  # the mean `eval --seeds` writes
    line, phases = eval_table.row(out, [0, 1, 8])
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:5] == ["mem-on", "0 / 1", "0.25 / 0.75 / 0.75", "0.50–1.00", "8 / –"]  # first score ≥ 0.8
    assert cells[5:9] == ["1 / –", "2 / 3", "0.00 / 0.25", "0 / 1"]  # the phase's rule, sessions, memory
    assert cells[9:] == ["1.020", "2/0 / 2/1", "oracle", "150"] and phases == []


def test_the_cli_prints_phase_lines_for_a_scenario_and_the_self_judges_agreement(tmp_path):
    phases = [
        {"personas": ["a"], "start": 0, "base_score": 0.0, "final_score": 1.0, "interactions_to_target": 8},
        {"personas": ["a", "b"], "start": 16, "base_score": 0.5, "final_score": 0.75, "interactions_to_target": None},
    ]
    agreement = {"reward_agreement": 0.875, "hint_rate_unsatisfied": 0.5}
    run = _run(0, [[0, 0.0], [16, 1.0], [16, 0.5], [32, 0.75]], memory=False, phases=phases, agreement=agreement)
    run["retention"] = {"a": 1.0}
    _write(tmp_path / "scn", run)
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "scn"), "--at", "0,16,32"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert "| scn | 0 | 0.00 / 0.50 / 0.75 |" in done.stdout
    assert "reward 0.88, hint on unsatisfied 0.50" in done.stdout and "| (off) | – |" in done.stdout
    assert "phase 2 (a + b, from 16): base 0.50 → 0.75, to target per seed –" in done.stdout
    assert "retention: a 1.0" in done.stdout


def _version(home: Path, version: int, status: str, memory: list, metrics: dict, guard: dict | None = None) -> None:
    folder = home / "adapters" / f"v{version}"
    folder.mkdir(parents=True)
    validation = {"memory": memory} | ({"guard": guard} if guard else {})
    meta = {"version": version, "status": status, "validation": validation, "metrics": metrics}
    (folder / "metadata.json").write_text(json.dumps(meta), encoding="utf-8")


def test_versions_lists_each_seeds_learned_checks_and_lever_metrics(eval_table, tmp_path):
    run = tmp_path / "brief"
    check = {"item_id": 1, "status": "active", "decision": "kept", "form": "length", "form_agree": 6, "form_n": 8,
             "form_words": [20.4, 33.0]}  # fmt: skip
    for seed in (1, 0):
        home = run / f"seed-{seed}" / "home"
        new = {"new_agree": 8, "new_n": 8, "new_words": [18.0, 19.6]}  # the probe's prompts (since stop 35)
        _version(home, 10, "ready", [check | {"decision": "learned"} | new], {})  # v10 sorts after v2 by number
        _version(home, 2, "ready", [check], {"student_adv_mean": -0.0904, "loss": 0.5})
        _version(home, 3, "rejected", [], {})
    lines = eval_table.version_lines(run)
    assert lines[:4] == [
        "seed-0:",
        "  v2 ready: #1 active → kept, length 6 of 8 (words 20 / 33); student_adv_mean -0.090",
        "  v3 rejected: no items checked",
        "  v10 ready: #1 active → learned, length 6 of 8 (words 20 / 33), new 8 of 8 (words 18 / 20)",
    ]
    assert lines[4] == "seed-1:" and len(lines) == 8


def test_topic_counts_the_last_first_replies_that_share_no_content_word(eval_table, tmp_path):
    import sqlite3

    home = tmp_path / "run" / "home"
    home.mkdir(parents=True)
    turns = [  # (session, seq, user, reply): only each chat's first turn counts, and only the last 3 of them
        (1, 1, "How do volcanoes form?", "Your answer is too long."),  # the oldest: cut by --topic 3
        (2, 1, "What is quantum computing?", "Your answer is too long."),
        (2, 2, "Thanks", "Happy to help."),  # a later turn of the chat: not a first message
        (3, 1, "How do I make tea?", "Boil water and steep the leaves for three minutes."),  # 'tea' missing: off
        (4, 1, "Why is the sky blue?", "Air scatters blue light more than red."),  # 'blue' shared
        (5, 1, "Explain recursion.", ""),  # an empty reply is not counted
    ]
    with sqlite3.connect(home / "clawdesk.db") as db:
        db.execute("CREATE TABLE turns (id INTEGER PRIMARY KEY, session_id INT, seq INT, user_content, reply_content)")
        db.executemany("INSERT INTO turns (session_id, seq, user_content, reply_content) VALUES (?, ?, ?, ?)", turns)
    lines = eval_table.off_topic(tmp_path / "run", 3)
    assert lines == [
        "run: 2 of the last 3 replies share no content word with the question",
        "  'Your answer is too long.'",
        "  'Boil water and steep the leaves for three minutes.'",
    ]


def test_versions_prints_the_guards_ratio_and_each_retrys(eval_table, tmp_path):
    home = tmp_path / "run" / "home"
    _version(home, 1, "ready", [], {}, {"ppl_ratio": 1.0221, "tried": [1.0507, 1.0221]})
    _version(home, 2, "ready", [], {}, {"ppl_ratio": 0.9964, "tried": [0.9964]})
    _version(home, 3, "rejected", [], {}, {"ppl_ratio": 1.0702, "tried": [1.1451, 1.0981, 1.0702]})
    assert eval_table.version_lines(tmp_path / "run") == [
        "run:",
        "  v1 ready, ppl 1.022 (tried 1.051, 1.022): no items checked",
        "  v2 ready, ppl 0.996: no items checked",
        "  v3 rejected, ppl 1.070 (tried 1.145, 1.098, 1.070): no items checked",
    ]
