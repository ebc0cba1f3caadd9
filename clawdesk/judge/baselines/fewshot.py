"""The v2 judge (a baseline, ``judge.method = "logprob"``): votes read from answer-word probabilities.

One few-shot plain-text prompt; the votes are the likeliest answer words.
The template (``clawdesk/judge/prompts/judge_v2.txt``) holds an ``=== intro ===``, labelled
``=== example VERDICT SAYS_HOW ===`` blocks and a ``=== query ===`` block with the
``{{request}}``, ``{{reply}}``, ``{{next_state}}`` and ``{{next_role}}`` placeholders. Each example
is followed by its two answers::

    Verdict: unsatisfied
    Says how: yes

A vote's score is the verdict whose continuation (``" satisfied"``, ``" unsatisfied"``,
``" unclear"``) the model finds most likely after ``Verdict:``; its hint vote is then read the same
way after ``Says how:``, with that verdict written in. No chat template is involved, so this works on
any GGUF, including the 135M demo model, whose sampled free-text votes were mostly unusable
(``docs/learning.md``).

Why one prompt with a fixed example order: llama.cpp reuses a cached prompt prefix, so the intro
and examples (~700 tokens) are evaluated once and every vote, both questions and the next turn pay
only for the query. The m votes differ in the order of the last :data:`ROTATE` examples (recency is
the strongest order bias of small models), and the majority rule of
:func:`clawdesk.judge.parse.majority` combines them. Each vote is written down as text in the
format :mod:`clawdesk.judge.parse` reads, so logged outputs of v1 and v2 look alike.

Quoted text is flattened to one line and any ``Verdict:`` / ``Says how:`` inside it is broken, so
nothing the user wrote can end the query or pose as an answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from clawdesk.errors import JudgeError
from clawdesk.judge.parse import flatten, hint_from_next_state, majority
from clawdesk.judge.vote import Ballot, NextState, Scorer

VERSION = "v2"
TEMPLATE = f"judge_{VERSION}.txt"
ROTATE = 3  # the last ROTATE examples change order from vote to vote
SCORE_KEY, HINT_KEY = "Verdict", "Says how"
SCORE_LABELS = {"satisfied": 1, "unsatisfied": -1, "unclear": 0}
HINT_LABELS = {"yes": 1, "no": 0}
CONTENT_FREE = ("N/A", "N/A", "N/A")  # request, reply, next state of the calibration query

_BLOCK = re.compile(r"^=== (intro|query|example (\w+) (\w+)) ===\n", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


@dataclass(frozen=True)
class Template:
    """The parsed v2 template: intro, examples as (verdict, says_how, text) and the query."""

    intro: str
    examples: tuple[tuple[str, str, str], ...]
    query: str


@cache
def load_template() -> Template:
    """Parse the v2 template (package data); a JudgeError names the file when it is malformed."""
    name = TEMPLATE
    try:
        text = resources.files("clawdesk.judge").joinpath("prompts", name).read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise JudgeError(f"Judge prompt file clawdesk/judge/prompts/{name} is missing; reinstall ClawDesk.") from err
    parts = _BLOCK.split(text)
    # split() with three groups gives [pre, head, verdict|None, says|None, body, head, ...]
    intro, query, examples = None, None, []
    for head, verdict, says, body in zip(parts[1::4], parts[2::4], parts[3::4], parts[4::4], strict=True):
        body = body.strip()
        if head == "intro":
            intro = body
        elif head == "query":
            query = body
        elif verdict in SCORE_LABELS and says in HINT_LABELS:
            examples.append((verdict, says, body))
        else:
            raise JudgeError(f"{name}: example '{verdict} {says}' needs a verdict and a yes/no.")
    if intro is None or query is None or len(examples) < ROTATE or parts[0].strip():
        raise JudgeError(f"{name} needs an intro, at least {ROTATE} examples and a query block; reinstall ClawDesk.")
    return Template(intro, tuple(examples), query)


def score_prompt(request: str, reply: str, next_state: str, next_role: str, *, vote: int) -> str:
    """Vote ``vote``'s prompt, ending in ``Verdict:``: the fixed examples, the rotated last ones, the query."""
    t = load_template()
    values = {
        "request": flatten(request),
        "reply": flatten(reply),
        "next_state": flatten(next_state),
        "next_role": "tool" if next_role == "tool" else "user",
    }
    query = _PLACEHOLDER.sub(lambda m: values[m.group(1)], t.query)
    fixed, tail = t.examples[:-ROTATE], list(t.examples[-ROTATE:])
    k = vote % ROTATE
    shots = [f"{body}\n{SCORE_KEY}: {v}\n{HINT_KEY}: {s}" for v, s, body in [*fixed, *tail[k:], *tail[:k]]]
    return "\n\n".join([t.intro, *shots, f"{query}\n{SCORE_KEY}:"])


def hint_prompt(score_prompt_text: str, verdict: str) -> str:
    """The same vote's prompt for the second question, with its verdict written in."""
    return f"{score_prompt_text} {verdict}\n{HINT_KEY}:"


def pick(labels: dict[str, int], logprobs: dict[str, float]) -> tuple[str, int, str]:
    """(label, vote, shown log-probs) for the most likely label."""
    label = max(logprobs, key=lambda k: logprobs[k])
    shown = " ".join(f"{k}={v:.2f}" for k, v in logprobs.items())
    return label, labels[label], shown


def score_text(shown: str, vote: int) -> str:
    """A score vote as logged text; it parses with :func:`clawdesk.judge.parse.parse_score`."""
    boxed = {1: "+1", 0: "0", -1: "-1"}[vote]
    return f"logprob {shown} \\boxed{{{boxed}}}"


def hint_text(shown: str, label: str) -> str:
    return f"logprob {shown}\nUseful: {label}"


class LogprobMethod:
    """The v2 vote method: vote i's likeliest verdict, then whether the next state says how.

    With ``calibrate`` each answer's log-prob on a content-free query is subtracted first; that
    prior is computed once per vote order and question (the prefix is cached, only the query is new)."""

    def __init__(self, *, calibrate: bool) -> None:
        self.calibrate = calibrate
        self._calibration: dict[tuple[int, str], dict[str, float]] = {}

    def cast(
        self, judge: Scorer, request: str, reply: str, next_state: NextState, ballot: Ballot, *, seed: int = 0
    ) -> tuple[str, str | None]:
        for vote in range(ballot.m):  # each vote answers both questions on one prompt (its prefix stays cached)
            text = score_prompt(request, reply, next_state.text, next_state.role, vote=vote)
            verdict, value, shown = self._most_likely(judge, text, SCORE_LABELS, (vote, ""))
            ballot.cast("score", value, score_text(shown, value))
            label, value, shown = self._most_likely(judge, hint_prompt(text, verdict), HINT_LABELS, (vote, verdict))
            ballot.cast("hint", value, hint_text(shown, label))
        hint = hint_from_next_state(next_state.text) if majority(ballot.votes["hint"]) == 1 else None
        return VERSION, hint

    def _most_likely(
        self, judge: Scorer, text: str, labels: dict[str, int], calib_key: tuple[int, str]
    ) -> tuple[str, int, str]:
        found = _logprobs(judge, text, labels)
        if self.calibrate:
            prior = self._calibration.get(calib_key)
            if prior is None:
                vote, verdict = calib_key
                blank = score_prompt(*CONTENT_FREE, "user", vote=vote)
                prior = _logprobs(judge, hint_prompt(blank, verdict) if verdict else blank, labels)
                self._calibration[calib_key] = prior
            found = {k: v - prior[k] for k, v in found.items()}
        return pick(labels, found)


def _logprobs(judge: Scorer, text: str, labels: dict[str, int]) -> dict[str, float]:
    engine = judge.engine
    conts = [engine.tokenize_plain(" " + label) for label in labels]
    prompt = engine.tokenize_plain(text, bos=True)
    room = engine.n_ctx - max(len(c) for c in conts)
    prompt = prompt[-room:]  # a prompt over the window loses its oldest examples, never the query
    return dict(zip(labels, judge.continuation_logprobs(prompt, conts), strict=True))
