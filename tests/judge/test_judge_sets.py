"""The labelled tool-step and standing/one-off sets, their loader and numbers, and the hint classifier.

The shipped sets are checked for what they must hold (size, categories, statuses that leave the
hidden failures to the model); the numbers (:func:`summarize`, :func:`summarize_standing`) on
hand-built rows with exact values; the classifier and ``clawdesk eval --judge-set`` on the real
demo model.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from clawdesk.cli import main
from clawdesk.config import JudgeConfig
from clawdesk.errors import InputError
from clawdesk.eval.judge_set import (
    CALL_STATUSES,
    SHIPPED_JUDGE_SETS,
    TOOL_CLEAR,
    format_report,
    load_cases,
    summarize,
    summarize_standing,
    tool_calls,
)
from clawdesk.eval.personas import assets_dir
from clawdesk.judge import standing
from clawdesk.judge.evidence import find_evidence
from clawdesk.judge.runner import Judge
from clawdesk.judge.tool_steps import RULES_VERSION, next_state


def _shipped(name: str) -> list[dict]:
    return load_cases(assets_dir() / name)


def test_the_shipped_tool_set_leaves_hidden_failures_to_the_model():
    cases = _shipped("judge-set-tools.jsonl")
    assert len(cases) >= 40 and len({c["id"] for c in cases}) == len(cases)
    assert {c["kind"] for c in cases} == {"tool-step"}
    by_cat = Counter(c["category"] for c in cases)
    assert by_cat["worked"] >= 15 and by_cat["hidden-failure"] >= 15
    for case in cases:
        statuses = {call["status"] for call in case["calls"]}
        assert statuses <= set(CALL_STATUSES)
        if case["category"] in TOOL_CLEAR:  # the status code shows nothing: every call ran and said ok
            assert statuses == {"ok"}, case["id"]
            assert case["label"] == (1 if case["category"] == "worked" else -1), case["id"]
        if case["category"] == "hidden-failure":
            assert case["directive"] and case["expected"], case["id"]
        if case["category"] == "worked":  # the evidence rules never fail a call that worked
            assert find_evidence(tool_calls(case)) == [], case["id"]
    shell = [c for c in cases if c["calls"][0]["name"] == "run_shell"]
    mcp = [c for c in cases if "." in c["calls"][0]["name"]]  # MCP tools are named server.tool
    assert len(shell) >= 10 and len(mcp) >= 5


def test_the_shipped_standing_set_is_balanced():
    cases = _shipped("judge-set-standing.jsonl")
    assert len(cases) >= 30 and len({c["id"] for c in cases}) == len(cases)
    labels = Counter(c["label"] for c in cases)
    assert set(labels) == {"standing", "one-off", "praise"} and abs(labels["standing"] - labels["one-off"]) <= 2
    assert labels["praise"] >= 10  # thanks the demo judge may take for a hint (docs/learning.md)


def test_every_shipped_set_loads():
    kinds = {name: {c["kind"] for c in _shipped(name)} for name in SHIPPED_JUDGE_SETS}
    assert kinds == {
        "judge-set.jsonl": {"turn"},
        "judge-set-tools.jsonl": {"tool-step"},
        "judge-set-standing.jsonl": {"standing"},
    }


TOOL_CASE = {
    "id": "t", "kind": "tool-step", "category": "worked", "request": "List files.",
    "reply": '<tool_call>\n{"name": "list_files", "arguments": {}}\n</tool_call>',
    "calls": [{"name": "list_files", "arguments": {}, "status": "ok", "result": "a.txt (3 bytes)"}],
    "label": 1, "directive": False,
}  # fmt: skip
STANDING_CASE = {
    "id": "s", "kind": "standing", "category": "standing", "request": "Hi", "next": "Keep it short.",
    "hint": "Keep it short.", "label": "standing",
}  # fmt: skip


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"kind": "tool"}, "kind must be one of turn, tool-step, standing"),
        ({"calls": []}, "calls must be a non-empty list"),
        ({"calls": [{"name": "x"}]}, "calls[0] needs keys arguments, name, result, status"),
        ({"calls": [TOOL_CASE["calls"][0] | {"status": "fine"}]}, "calls[0]: status must be one of ok"),
        ({"label": 2}, "label must be 1, 0 or -1"),
    ],
)
def test_a_bad_tool_case_is_named_by_line_and_key(tmp_path, change, needle):
    path = tmp_path / "set.jsonl"
    path.write_text(json.dumps(STANDING_CASE) + "\n" + json.dumps(TOOL_CASE | change) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_cases(path)
    assert f"{path}:2: {needle}" in str(err.value)


@pytest.mark.parametrize(
    "change, needle", [({"label": "maybe"}, "standing, one-off or praise"), ({"hint": " "}, "hint is empty")]
)
def test_a_bad_standing_case_is_named(tmp_path, change, needle):
    path = tmp_path / "set.jsonl"
    path.write_text(json.dumps(STANDING_CASE | change) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=needle):
        load_cases(path)


def test_tool_case_calls_become_the_records_the_judge_reads():
    case = TOOL_CASE | {"calls": [*TOOL_CASE["calls"], {"name": "x", "arguments": {"a": 1}, "status": "error",
                                                            "result": "boom"}]}  # fmt: skip
    calls = tool_calls(case)
    assert [(c.idx, c.name, c.status, c.result) for c in calls] == [
        (0, "list_files", "ok", "a.txt (3 bytes)"),
        (1, "x", "error", "boom"),
    ]
    assert json.loads(calls[1].raw) == {"name": "x", "arguments": {"a": 1}}
    assert next_state(calls).text == "a.txt (3 bytes)"  # only ok results reach the model


def test_summarize_counts_tool_steps_with_their_own_clear_categories():
    rows = [
        {"category": "worked", "label": 1, "reward": 1, "directive": False, "hint": None},
        {"category": "worked", "label": 1, "reward": -1, "directive": False, "hint": "x"},
        {"category": "hidden-failure", "label": -1, "reward": -1, "directive": True, "hint": "y"},
        {"category": "hidden-failure", "label": -1, "reward": 1, "directive": True, "hint": None},
        {"category": "status-error", "label": -1, "reward": -1, "directive": True, "hint": "z"},
        {"category": "no-signal", "label": 0, "reward": 0, "directive": False, "hint": None},
    ]
    report = summarize(rows, 12.0, clear=TOOL_CLEAR)
    assert report["reward_accuracy"] == 4 / 6 and report["clear_accuracy"] == 2 / 4 and report["n_clear"] == 4
    assert report["confusion"] == {
        "1": {"1": 1, "0": 0, "-1": 1},
        "0": {"1": 0, "0": 1, "-1": 0},
        "-1": {"1": 1, "0": 0, "-1": 2},
    }
    assert report["hint_precision"] == 2 / 3 and report["hint_recall"] == 2 / 3
    assert report["hint_rate_satisfied"] == 1 / 2 and report["seconds_per_case"] == 2.0
    assert summarize(rows, 12.0)["n_clear"] == 0  # the turn categories are not the tool ones


def test_summarize_standing_counts_unsure_as_wrong_and_reports_it():
    rows = [
        {"label": "standing", "kind": "standing"},
        {"label": "standing", "kind": "unsure"},
        {"label": "one-off", "kind": "one-off"},
        {"label": "one-off", "kind": "standing"},
        {"label": "one-off", "kind": "one-off"},
        {"label": "one-off", "kind": "praise"},  # wrong, but the memory drops it as it should
        {"label": "praise", "kind": "praise"},
        {"label": "praise", "kind": "unsure"},  # kept: the memory's error
    ]
    report = summarize_standing(rows, 16.0)
    assert report["accuracy"] == 4 / 8 and report["decided_accuracy"] == 4 / 6 and report["unsure_rate"] == 2 / 8
    assert report["keep_accuracy"] == 6 / 8  # wrong: the one-off taken for standing, the praise left unsure
    assert report["confusion"] == {
        "standing": {"standing": 1, "one-off": 0, "praise": 0, "unsure": 1},
        "one-off": {"standing": 1, "one-off": 2, "praise": 1, "unsure": 0},
        "praise": {"standing": 0, "one-off": 0, "praise": 1, "unsure": 1},
    }
    text = "\n".join(
        format_report({"n_cases": 0, "model": "m", "method": "channel", "votes": 3, "standing": report}).splitlines()
    )
    assert "standing, one-off or praise hints: 8 cases" in text and "turns:" not in text
    assert "keep accuracy         0.75" in text


@pytest.mark.parametrize(
    "margins, kind",
    [
        ((0.25, 0.25, 0.25), "standing"),  # exactly the margin decides
        ((0.24, 0.25, 0.25), "unsure"),
        ((10.0, -2.0, -3.0), "standing"),  # the mean, not a majority of signs
        ((-0.3,), "one-off"),
        ((1.0, -1.0), "unsure"),
    ],
)
def test_decide_is_the_sign_of_the_mean_margin_with_an_unsure_band(margins, kind):
    assert standing.decide(margins, unsure_margin=0.25) == kind
    assert standing.decide(margins, -0.3, unsure_margin=0.25, praise_slack=0.25) == kind  # praise explains less


@pytest.mark.parametrize("margins", [(5.0, 5.0), (-5.0,), (0.0,)])
def test_praise_that_explains_the_words_best_or_nearly_wins_over_any_margin(margins):
    assert standing.decide(margins, 0.01) == "praise"
    assert standing.decide(margins, -0.2, praise_slack=0.25) == "praise"  # a near tie goes to praise
    assert standing.decide(margins, -0.25, praise_slack=0.25) != "praise"
    assert standing.decide(margins, 0.0, praise_slack=0.0) != "praise"  # without slack a tie is not praise


def test_decide_needs_a_vote():
    with pytest.raises(ValueError):
        standing.decide(())


def test_classify_hint_tells_a_standing_preference_from_a_one_off_on_the_demo_model(engine):
    standing_hint = standing.classify_hint_votes(
        engine, "Use the 24-hour clock with me, always.", "When does the pharmacy close?"
    )
    one_off = standing.classify_hint_votes(
        engine, "The appointment is Tuesday, not Monday.", "Book a reminder for the dentist."
    )
    assert len(standing_hint.margins) == standing.DEFAULT_VOTES
    assert standing_hint.kind == "standing" and one_off.kind == "one-off"
    # Through a judge: its vote count, the same numbers (the same model calls).
    judge = Judge(engine, JudgeConfig(votes=2))
    again = standing.classify_hint_votes(
        judge, "Use the 24-hour clock with me, always.", "When does the pharmacy close?"
    )
    assert again.margins == pytest.approx(standing_hint.margins[:2], abs=1e-3)
    assert standing.classify_hint(judge, "Use the 24-hour clock with me, always.", "When does the pharmacy close?") in (
        "standing",
        "one-off",
        "praise",
        "unsure",
    )


def test_classify_hint_takes_thanks_for_praise_on_the_demo_model(engine):
    thanks = standing.classify_hint_votes(engine, "Awesome, I love it, thanks a lot!", "Suggest a name for my cat.")
    assert thanks.kind == "praise" and thanks.praise_margin > 0
    wish = standing.classify_hint_votes(engine, "Please answer me in German from now on.", "What is a star?")
    assert wish.kind == "standing" and wish.praise_margin < -standing.PRAISE_SLACK
    # The self-judged eval's near tie (its margin was just below 0 on a native llama.cpp build, +0.16 on an
    # AVX2 build): praise either way (the slack rule itself: the decide() tests above).
    near = standing.classify_hint_votes(
        engine, "Lovely, that reads really naturally.", "How do I plant tomatoes in a balcony pot?"
    )
    assert near.praise_margin > -standing.PRAISE_SLACK and near.kind == "praise"
    with pytest.raises(InputError):
        standing.classify_hint(engine, "  ", "Hi")


def test_the_next_message_is_quoted_when_it_is_more_than_the_hint(engine):
    plain = standing.classify_hint_votes(engine, "Keep it short.", "Explain DNS.")
    same = standing.classify_hint_votes(engine, "Keep it short.", "Explain DNS.", "Keep   it short.")
    longer = standing.classify_hint_votes(engine, "Keep it short.", "Explain DNS.", "Ugh. Keep it short.")
    assert same.margins == pytest.approx(plain.margins, abs=1e-3) and longer.margins != plain.margins


def test_rules_decide_the_shipped_status_cases_without_the_model(engine):
    judge = Judge(engine, JudgeConfig())
    for case in _shipped("judge-set-tools.jsonl"):
        if case["category"] in TOOL_CLEAR:
            continue
        verdict = judge.vote(case["request"], case["reply"], next_state(tool_calls(case)))
        assert verdict.prompt_version == RULES_VERSION and verdict.reward == case["label"], case["id"]


def test_eval_judge_set_reports_turns_tool_steps_and_standing_cases(tmp_path, demo_gguf, monkeypatch, capsys):
    monkeypatch.setenv("CLAWDESK_HOME", str(tmp_path / "home"))
    rules_case = TOOL_CASE | {
        "id": "r", "category": "status-error", "label": -1, "directive": True,
        "calls": [{"name": "run_shell", "arguments": {}, "status": "error", "result": "exit code 1\nno"}],
    }  # fmt: skip
    turn = {"id": "a", "category": "thanks", "request": "2+2?", "reply": "4", "next": "Thanks!", "next_role": "user",
            "label": 1, "directive": False}  # fmt: skip
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(json.dumps(c) for c in (turn, TOOL_CASE, rules_case, STANDING_CASE)), encoding="utf-8")
    assert main(["eval", "--judge-set", str(path), "--model", str(demo_gguf), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "turns: 1 cases" in out and "tool steps: 2 cases" in out and "tool-step accuracy" in out
    assert "standing, one-off or praise hints: 1 cases" in out
    report = json.loads((tmp_path / "out" / "judge-set.json").read_text())
    assert report["n_cases"] == 1 and report["files"] == [str(path)]
    tools = report["tool_steps"]
    assert tools["n_cases"] == 2 and tools["n_clear"] == 1
    assert tools["by_category"]["status-error"]["accuracy"] == 1.0  # the rules
    assert [r["prompt_version"] for r in tools["cases"]] == ["tool-v1-channel", RULES_VERSION]
    assert report["standing"]["n_cases"] == 1 and len(report["standing"]["cases"][0]["margins"]) == 3


@pytest.mark.parametrize(
    ("hint", "missed"),
    [
        ("That doesn't answer my question.", True),
        ("You didn't answer what I asked.", True),
        ("It does not really address the question.", True),
        ("That's not what I asked. When does it open?", True),
        ("This has nothing to do with my question.", True),
        ("You ignored my question.", True),
        ("Don't answer with lists.", False),  # a wish about every answer, not a complaint about this one
        ("Always answer the question directly first, then explain.", False),
        ("Keep answers short.", False),
    ],
)
def test_misses_question_finds_complaints_that_the_reply_answered_nothing(hint, missed):
    assert standing.misses_question(hint) is missed


@pytest.mark.parametrize(
    ("hint", "thanks"),
    [
        ("Good, no fluff. Thank you.", True),  # a form word ("fluff"), but it says the reply had none
        ("Nice and short, no rambling. Thank you!", True),
        ("Cheers, that worked.", True),
        ("No lists, thanks.", False),  # thanks without approval: a polite request
        ("Thanks, but from now on skip the greeting.", False),
        ("Great, thank you! Could you make the next one shorter?", False),
        ("Perfect, thanks. Please always do it like that.", False),
        ("Whenever you write emails for me, sign them 'Cheers, Sam'.", False),  # quoted words are the wish's object
        ("Keep answers short.", False),
        ("That's no good, thanks.", False),  # approval words negated: a complaint said politely
        ("Not very helpful, thanks.", False),
        ("That wasn't clear, thank you.", False),
        ("Thanks, but it hasn't worked.", False),
        ("Thanks. Not good.", False),
        ("Good answer, not too long. Thanks!", True),  # the negation is of something else
    ],
)
def test_only_thanks_finds_praise_that_asks_for_nothing(hint, thanks):
    assert standing.only_thanks(hint) is thanks


def test_thanks_that_ask_for_nothing_are_praise_whatever_the_votes_say(engine):
    # The self-judged brief eval kept this as a length wish (stop 38): it replaced the person's real
    # length item and the demo model answered it ("Aw, aw, aw! Good, no fluff!").
    request = "What is quantum computing?"
    found = standing.classify_hint_votes(engine, "Good, no fluff. Thank you.", request)
    # The votes alone say standing (margins 7.4, 4.8, 4.0 nats; praise 0.73 nats behind).
    assert (found.kind, found.rule) == ("praise", "thanks")
    assert standing.decide(found.margins, found.praise_margin) == "standing"
    wish = standing.classify_hint_votes(engine, "Thanks, but from now on skip the greeting.", request)
    assert wish.rule == ""


def test_a_complaint_that_the_reply_answered_nothing_is_a_one_off_whatever_the_votes_say(engine):
    # The demo model's votes take this for a standing wish (margins 4.5, -0.6, 0.2 nats): kept as an item,
    # it sat after every later question and came back as whole replies (docs/learning.md, stop 37).
    request = "What's the best way to learn to code?"
    found = standing.classify_hint_votes(engine, "You didn't answer what I asked.", request)
    assert (found.kind, found.rule) == ("one-off", "missed-question") and sum(found.margins) > 0
    wish = standing.classify_hint_votes(engine, "Don't answer with lists.", "What should I pack for a hike?")
    assert wish.rule == "" and wish.kind == "standing"
