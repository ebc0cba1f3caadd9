"""The v2 judge prompt: one few-shot plain-text prompt whose votes are read from outcome probabilities.

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

VERSION = "v2"
TEMPLATE = f"judge_{VERSION}.txt"
QUOTE_CHARS = 400  # per quoted text: the judge needs the gist; long prompts only slow it down
ROTATE = 3  # the last ROTATE examples change order from vote to vote
SCORE_KEY, HINT_KEY = "Verdict", "Says how"
SCORE_LABELS = {"satisfied": 1, "unsatisfied": -1, "unclear": 0}
HINT_LABELS = {"yes": 1, "no": 0}
CONTENT_FREE = ("N/A", "N/A", "N/A")  # request, reply, next state of the calibration query

_BLOCK = re.compile(r"^=== (intro|query|example (\w+) (\w+)) ===\n", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
_KEYS = re.compile(rf"\b({SCORE_KEY}|{HINT_KEY})\s*:", re.IGNORECASE)


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


def flatten(text: str, limit: int = QUOTE_CHARS) -> str:
    """User text made inert for the prompt: one line, no answer key that could pose as an answer, clipped."""
    text = " ".join(text.split())
    text = _KEYS.sub(lambda m: f"{m.group(1)} -", text)
    if len(text) > limit:
        half = (limit - 5) // 2
        text = f"{text[:half]} […] {text[-half:]}"
    return text


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


def hint_from_next_state(next_state: str) -> str:
    """The hint a v2 judge proposes: the next state's own words (a directive says how, in the user's words)."""
    text = " ".join(next_state.split())
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1] + "…"
