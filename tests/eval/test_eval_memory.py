"""The preference memory in the eval: sessions_to_effect, score_without_memory, and a tiny real run with it on.

The run is the real pipeline (llama.cpp on the demo model, SQLite, the oracle, the torch learner,
hot-swap) made tiny, with a persona no reply can satisfy, so the oracle hints after the first
interaction and the item it becomes is certain: what is checked is where the item goes (the next
chats' prompts, the scores, result.json), never how well the model follows it.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

import pytest

from clawdesk.cli import main
from clawdesk.config import MemoryConfig
from clawdesk.eval.memory import MemoryRun, oracle_classifier, sessions_to_effect
from clawdesk.eval.scoring import Scorer
from clawdesk.preferences import MEMORY_HEADER, USER_MEMORY_HEADER
from clawdesk.store.prefs import add_preference

MEMORY_KEYS = {"memory", "memory_items", "score_without_memory", "sessions_to_effect"}

# Requests whose replies repeat one of their words: a reply that shares none is called out as answering
# nothing before the check (clawdesk.eval.topic), and its hint is a one-off, not an item.
NEVER = """
name = "never-pleased"
description = "Test persona: wants a word no reply ever has, so every reply gets the hint."
prompts = ["How do I make tea?", "How do I boil an egg?", "How do I brew coffee?", "How do I toast bread?"]
heldout = ["Name two planets."]
[[check]]
kind = "regex_present"
pattern = 'xyzzy-never'
[feedback]
satisfied = ["Thanks."]
unsatisfied = ["Not what I wanted."]
hint = "Answer in plain prose without bullet points or numbered lists."
"""


@pytest.mark.parametrize(
    ("satisfied", "expected"),
    [
        ([], None),
        ([True, True], None),  # too short for three in a row
        ([True, True, True], 0),  # from the start
        ([False, True, True, True], 1),
        ([False, True, True, False, True, True, True, False], 4),  # a broken streak does not count
        ([False, False, True, True, True, True, True], 2),  # the first run of three, not the longest
        ([False] * 6, None),
    ],
)
def test_sessions_to_effect_is_the_interaction_after_which_three_replies_in_a_row_satisfied(satisfied, expected):
    assert sessions_to_effect(satisfied) == expected


def test_sessions_to_effect_counts_other_run_lengths():
    assert sessions_to_effect([False, True, False, True], run=1) == 1
    assert sessions_to_effect([False, True, True, True, True], run=4) == 1


@dataclass(frozen=True)
class _Target:
    heldout: tuple[str, ...] = ("Name two planets.",)
    hint: str = "Answer in prose."

    def satisfies(self, reply: str, request: str) -> bool:
        return bool(reply.strip())


class _Seen:
    """The real engine, with the system prompts and user messages it was asked to build remembered."""

    def __init__(self, engine):
        self.engine = engine
        self.systems: list[str] = []
        self.users: list[str] = []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def build_prompt(self, system, history, user, **kwargs):
        self.systems.append(system)
        self.users.append(user)
        return self.engine.build_prompt(system, history, user, **kwargs)


def test_the_scorer_serves_the_memory_and_score_without_memory_removes_it(engine, store):
    item = add_preference(store, "Answer in plain prose, never in lists.").item
    seen = _Seen(engine)
    run = MemoryRun.start(MemoryConfig(budget_tokens=128, placement="system"), engine, oracle_classifier)
    run.changed(store, 3)
    scorer = Scorer(seen, _Target(), "You are ClawDesk.", 8, memory=run.served_block(store))
    scorer.score()
    (served,) = seen.systems
    assert served.startswith("You are ClawDesk.") and MEMORY_HEADER in served and item.text in served
    assert seen.users == ["Name two planets."]
    out = run.result(store, scorer, [False, True, True, True], final_score=1.0)
    assert seen.systems[1:] == ["You are ClawDesk."]  # score_without_memory: the chat's prompt, no item
    assert out["memory"] is True and out["score_without_memory"] == 1.0 and out["sessions_to_effect"] == 1
    assert out["memory_items"] == [
        {"id": item.id, "text": item.text, "status": "active", "created_at": 3, "learned_at": None}
    ]
    assert scorer.memory is not None  # put back for any later score


def test_the_scorer_places_the_memory_after_the_user_message_when_the_app_does(engine, store):
    item = add_preference(store, "Answer in plain prose, never in lists.").item
    seen = _Seen(engine)
    assert engine.identity.is_demo  # "auto" on the demo model is "user", as the app's chats get it
    run = MemoryRun.start(MemoryConfig(budget_tokens=128), engine, oracle_classifier)
    assert run.placement == "user"
    scorer = Scorer(seen, _Target(), "You are ClawDesk.", 8, memory=run.served_block(store))
    scorer.score()
    assert seen.systems == ["You are ClawDesk."]
    (user,) = seen.users
    assert user.startswith("Name two planets." + USER_MEMORY_HEADER) and item.text in user
    run.result(store, scorer, [True], final_score=1.0)
    assert seen.users[1:] == ["Name two planets."]  # score_without_memory


def test_with_the_memory_off_nothing_is_noted_or_served(engine, store):
    run = MemoryRun.start(MemoryConfig(enabled=False), engine, oracle_classifier)
    assert not run.on and run.served_block(store) is None and not run.changed(store, 1)
    out = run.result(store, None, [True] * 3, final_score=0.5)
    assert out == {"memory": False, "sessions_to_effect": 0, "memory_items": [], "score_without_memory": 0.5}


def _tiny_run(tmp_path, demo_gguf, monkeypatch) -> list[str]:
    """``clawdesk eval`` arguments for 4 interactions of the NEVER persona, a round every 2, oracle judge."""
    persona = tmp_path / "never.toml"
    persona.write_text(NEVER, encoding="utf-8")
    monkeypatch.setenv("CLAWDESK_HOME", str(tmp_path / "user-home"))
    args = ["eval", "--persona", str(persona), "--model", str(demo_gguf), "--interactions", "4"]
    args += ["--max-reply-tokens", "16", "--judge", "oracle", "--train-every", "2", "--batch-size", "2"]
    return [*args, "--train-option", "max_ppl_ratio=0"]  # the guard's own passes: tests/eval/test_eval.py, tests/learn


def test_a_tiny_run_with_the_memory_on_notes_the_hint_serves_it_and_reports_it(tmp_path, demo_gguf, monkeypatch):
    out = tmp_path / "on"
    args = _tiny_run(tmp_path, demo_gguf, monkeypatch)
    assert main([*args, "--memory", "on", "--out", str(out)]) == 0
    r = json.loads((out / "result.json").read_text())
    assert set(r) >= MEMORY_KEYS and r["memory"] is True
    (item,) = r["memory_items"]  # the oracle's one hint, noted after the first interaction
    assert item["text"].startswith("Answer in plain prose") and item["created_at"] == 1
    assert item["status"] in ("active", "learned") and (item["learned_at"] is None) == (item["status"] == "active")
    # Scored again right after the memory changed (interaction 1), besides after each of the 2 training rounds.
    assert [n for n, _ in r["scores"]] == [0, 1, 2, 4]
    assert r["sessions_to_effect"] is None and r["score_without_memory"] == 0.0  # nothing satisfies this persona
    conn = sqlite3.connect(out / "home" / "clawdesk.db")
    try:
        # Interactions 2-4 were served with the item (each turn and its recorded next message).
        held = conn.execute("SELECT count(*) FROM turn_memory WHERE block LIKE '%plain prose%'").fetchone()[0]
        assert held == 6
        students = conn.execute("SELECT count(*) FROM steps WHERE student_prompt_ids IS NOT NULL").fetchone()[0]
        assert students == 6
    finally:
        conn.close()


def test_only_the_shuffled_control_judges_per_round_with_the_memory_on():
    from clawdesk.eval.experiment import METHODS, EvalOptions

    for method in METHODS:
        opts = EvalOptions(method=method, judge="oracle")
        assert opts.judges_at_once(True) is (method != "shuffled")
        assert opts.judges_at_once(False) is False


def test_the_shuffled_control_with_the_memory_notes_items_at_the_rounds_end(tmp_path, demo_gguf, monkeypatch):
    """Judged at once, a round holds one turn and the permutation is the identity (stop 40's shuffled run
    equalled the combined one exactly); judged per round, the item comes at the round's end (2, not 1)."""
    out = tmp_path / "shuffled"
    args = _tiny_run(tmp_path, demo_gguf, monkeypatch)
    assert main([*args, "--method", "shuffled", "--memory", "on", "--out", str(out)]) == 0
    r = json.loads((out / "result.json").read_text())
    (item,) = r["memory_items"]
    assert item["created_at"] == 2
    assert [n for n, _ in r["scores"]] == [0, 2, 4]  # no extra point at 1: nothing was noted there
