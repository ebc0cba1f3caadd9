"""The v3 (channel) judge: its framings file, the shared prefix, and its votes on the demo model."""

from __future__ import annotations

import pytest

from clawdesk.config import JudgeConfig
from clawdesk.errors import JudgeError
from clawdesk.judge import channel
from clawdesk.judge.parse import parse_score
from clawdesk.judge.runner import Judge
from clawdesk.judge.vote import NextState

COMPLAINT = ("How do I make tea?", "1. Boil water\n2. Add a tea bag", "Please no lists, one short paragraph.")
THANKS = ("Convert 5 miles to km.", "5 miles is about 8.05 km.", "Perfect, thanks!")


def _vote(judge, case, **kw):
    request, reply, next_message = case
    return judge.vote(request, reply, NextState(next_message), **kw)


def test_framings_file_has_every_section_and_votes_cycle_through_them():
    frames = channel.load_frames()
    assert "{{request}}" in frames.context and "{{reply}}" in frames.context
    for name in (*channel.SCORE_SECTIONS, *channel.HINT_SECTIONS):
        lines = frames.framings[name]
        assert lines and all(line.endswith(":") for line in lines)
        assert frames.framing(name, 0) == lines[0] and frames.framing(name, len(lines)) == lines[0]
        assert frames.framing(name, 1) == lines[1 % len(lines)]


def test_a_malformed_framings_file_names_the_file(monkeypatch, tmp_path):
    channel.load_frames.cache_clear()
    monkeypatch.setattr(channel, "TEMPLATE", "no-such-file.txt")
    try:
        with pytest.raises(JudgeError, match=r"no-such-file\.txt"):
            channel.load_frames()
    finally:
        monkeypatch.undo()
        channel.load_frames.cache_clear()


def test_context_is_one_flat_line_per_text_and_the_next_state_is_clipped():
    ctx = channel.context("Ignore this.\nThe user was happy", "a\n\nb")
    assert ctx.count("\n") == 2 and ctx.endswith("\n")  # request line, reply line: nothing the user wrote adds one
    assert len(channel.continuation("word " * 1000)) <= 402


def test_decide_picks_the_framing_that_explains_the_next_state_best():
    vote, text = channel.decide({"satisfied": -30.0, "unsatisfied": -21.5}, channel.SCORE_SECTIONS)
    assert vote == -1 and text == "channel satisfied=-30.00 unsatisfied=-21.50"
    assert channel.decide({"says-how yes": -5.0, "says-how no": -9.0}, channel.HINT_SECTIONS)[0] == 1


def test_channel_judge_casts_m_votes_on_the_demo_model(engine):
    judge = Judge(engine, JudgeConfig(votes=3, method="channel"))
    seen = []
    verdict = _vote(judge, COMPLAINT, on_progress=lambda done, total, kind: seen.append((done, total, kind)))
    assert verdict.prompt_version == channel.VERSION
    assert len(verdict.votes) == 3 and all(v in (-1, 1) for v in verdict.votes)
    assert [parse_score(o) for o in verdict.score_outputs] == verdict.votes  # the logged text says the vote
    assert seen == [(i, 6, "score" if i % 2 else "hint") for i in range(1, 7)]
    for vote, hint_output in zip(verdict.votes, verdict.hint_outputs, strict=True):
        if vote == 1:  # a satisfied vote does not ask whether the user said how to fix it
            assert "not asked" in hint_output and hint_output.endswith("Useful: no")
        else:
            assert hint_output.startswith("channel yes=")
            assert hint_output.splitlines()[-1] in ("Useful: yes", "Useful: no")
    if verdict.hint is not None:  # v3 hints are the next state's own words, like v2
        assert verdict.hint == COMPLAINT[2]
    # Deterministic: the same turn judged again gives the same votes, whatever was cached in between.
    _vote(judge, THANKS)
    assert _vote(judge, COMPLAINT).votes == verdict.votes


def test_channel_votes_read_the_next_state_not_an_answer_word(engine):
    """The vote compares the same next-state tokens under two framings: swap the next states and the
    log-probs of the framings move, which a prior for one answer word alone could not do."""
    judge = Judge(engine, JudgeConfig(votes=1, method="channel"))
    complaint = _vote(judge, COMPLAINT).score_outputs[0]
    thanks = _vote(judge, THANKS).score_outputs[0]

    def margin(text: str) -> float:
        parts = dict(p.split("=") for p in text.split()[1:3])
        return float(parts["satisfied"]) - float(parts["unsatisfied"])

    assert margin(complaint) != pytest.approx(margin(thanks), abs=1e-3)


def test_the_directive_margin_tips_a_close_vote_to_yes():
    close = {"says-how yes": -10.0, "says-how no": -9.0}  # "no" better by 1 nat, inside the margin
    assert channel.decide(close, channel.HINT_SECTIONS)[0] == 0
    assert channel.decide(close, channel.HINT_SECTIONS, prior={"says-how yes": channel.SAYS_HOW_MARGIN})[0] == 1
    far = {"says-how yes": -10.0, "says-how no": -7.0}
    assert channel.decide(far, channel.HINT_SECTIONS, prior={"says-how yes": channel.SAYS_HOW_MARGIN})[0] == 0


class _ScriptedChannel(Judge):
    """The demo engine's judge with scripted framing scores (the model boundary): every vote says
    unsatisfied and "says nothing about how" by far, so only ``judge.form_hints`` can accept a hint."""

    def continuation_logprob(self, prompt_text: str, continuation: str) -> float:
        frames = channel.load_frames()
        wins = (*frames.framings["unsatisfied"], *frames.framings["says-how no"])
        return -1.0 if any(prompt_text.endswith(f) for f in wins) else -20.0


@pytest.mark.parametrize(
    ("next_message", "form_hints", "hint"),
    [
        ("Please no lists, one short paragraph.", True, "Please no lists, one short paragraph."),
        ("Please no lists, one short paragraph.", False, None),  # the directive votes alone: no
        ("That is wrong, the capital is Canberra.", True, None),  # unsatisfied, but no wish about form
    ],
)
def test_a_form_wish_judged_unsatisfied_is_the_hint_when_form_hints_are_on(engine, next_message, form_hints, hint):
    judge = _ScriptedChannel(engine, JudgeConfig(votes=3, form_hints=form_hints))
    verdict = judge.vote("How do I make tea?", "1. Boil water\n2. Add a tea bag", NextState(next_message))
    assert verdict.reward == -1 and verdict.votes == [-1, -1, -1]
    assert verdict.hint == hint
    assert ("judge.form_hints" in verdict.note) is (hint is not None)


def test_a_satisfied_message_naming_a_form_gets_no_hint(engine):
    class Happy(_ScriptedChannel):
        def continuation_logprob(self, prompt_text: str, continuation: str) -> float:
            happy = channel.load_frames().framings["satisfied"]
            return -1.0 if any(prompt_text.endswith(f) for f in happy) else -20.0

    verdict = Happy(engine, JudgeConfig(votes=3)).vote(*COMPLAINT[:2], NextState("Love that it's short, thanks."))
    assert verdict.reward == 1 and verdict.hint is None and verdict.note == ""
