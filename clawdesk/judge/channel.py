"""The v3 ("channel") judge: which account of the user's mood best explains what they wrote next.

Instead of asking the model for a verdict (the v1 chat prompts and the v2 few-shot prompts), the
channel judge reads the next state as the *continuation* of a short story and compares how likely
the model finds it after each framing::

    A user asked an assistant: {request}
    The assistant answered: {reply}
    The user was happy with the answer and replied: <next state>      log p = a
    The user was unhappy with the answer and replied: <next state>    log p = b

A vote is +1 when a > b, else −1. The next state's own wording carries the evidence, and both
framings score the same tokens, so a small model's prior for one answer word (the v2 judge's
problem: see ``docs/learning.md``) cancels out. This is the "noisy channel" way of prompting small
language models (Min et al., 2022). Vote i uses the i-th framing of each label (cycled), and the
m votes are combined by :func:`clawdesk.judge.parse.majority`.

The directive question (does the next state say *how* the reply should have been?) is asked the
same way with the ``says-how yes`` / ``says-how no`` framings, and only on votes that were not
satisfied: a satisfied turn needs no correction. The framings live in
``clawdesk/judge/prompts/channel_v3.txt`` (sections ``=== context ===``, ``=== satisfied ===``,
``=== unsatisfied ===``, ``=== says-how yes ===``, ``=== says-how no ===``; one framing per line).

This is the shipped vote method (:class:`ChannelMethod`, see :mod:`clawdesk.judge.vote`), with two
sets of framings: :data:`TURN` for the user's next message and :data:`TOOL` for a tool step's
results (``tool_v1.txt``: "The tool call worked / failed and returned:"). One implementation casts
the votes of both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from clawdesk.errors import JudgeError
from clawdesk.judge.parse import flatten, hint_from_next_state, majority
from clawdesk.judge.vote import Ballot, NextState, Scorer

VERSION = "v3-channel"
TEMPLATE = "channel_v3.txt"
SCORE_SECTIONS = {"satisfied": 1, "unsatisfied": -1}
HINT_SECTIONS = {"says-how yes": 1, "says-how no": 0}
# A directive vote says yes unless "no" explains the next state better by more than this many nats.
# Each paraphrase pair leans one way on its own; without the margin the demo model accepted a hint
# on 0.25 of the directive cases of assets/judge-set.jsonl (docs/learning.md).
SAYS_HOW_MARGIN = 2.0

_SECTION = re.compile(r"^=== ([\w -]+?) ===\n", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


@dataclass(frozen=True)
class Frames:
    """The parsed v3 template: the context block and the framings of every label."""

    context: str
    framings: dict[str, tuple[str, ...]]

    def framing(self, label: str, vote: int) -> str:
        lines = self.framings[label]
        return lines[vote % len(lines)]


@cache
def load_frames() -> Frames:
    """Parse the v3 template (package data); a JudgeError names the file when it is malformed."""
    return load_template(TEMPLATE, (*SCORE_SECTIONS, *HINT_SECTIONS))


@cache
def load_template(template: str, labels: tuple[str, ...]) -> Frames:
    """Parse a framings file of ``clawdesk/judge/prompts`` with a ``context`` section and one per label.

    Also used for the tool-step framings (``tool_v1.txt``, :data:`TOOL`)."""
    try:
        text = resources.files("clawdesk.judge").joinpath("prompts", template).read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise JudgeError(
            f"Judge prompt file clawdesk/judge/prompts/{template} is missing; reinstall ClawDesk."
        ) from err
    parts = _SECTION.split(text)
    sections = {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}
    needed = ["context", *labels]
    missing = [name for name in needed if not sections.get(name)]
    if missing or parts[0].strip():
        raise JudgeError(f"{template} needs non-empty sections {', '.join(needed)}; missing: {', '.join(missing)}.")
    framings = {
        name: tuple(line.strip() for line in sections[name].splitlines() if line.strip()) for name in needed[1:]
    }
    return Frames(sections["context"], framings)


def context(request: str, reply: str, frames: Frames | None = None) -> str:
    """The shared prefix of every framing (evaluated once per turn: llama.cpp keeps it cached)."""
    values = {"request": flatten(request), "reply": flatten(reply)}
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), (frames or load_frames()).context) + "\n"


def continuation(next_state: str) -> str:
    """The scored text: the next state, flattened and clipped like every quoted text."""
    return " " + flatten(next_state)


def decide(
    logprobs: dict[str, float], labels: dict[str, int], *, prior: dict[str, float] | None = None
) -> tuple[int, str]:
    """(vote, logged text) for one vote: the label whose framing explains the next state best.

    ``prior`` adds a fixed offset (nats) to a label before comparing (the directive margin)."""
    prior = prior or {}
    best = max(logprobs, key=lambda k: logprobs[k] + prior.get(k, 0.0))
    shown = " ".join(f"{k.split()[-1]}={v:.2f}" for k, v in logprobs.items())
    return labels[best], f"channel {shown}"


@dataclass(frozen=True)
class ChannelMethod:
    """The channel vote method with one set of framings (:data:`TURN` or :data:`TOOL`).

    Vote i: which score framing explains the next state best, then (unless it was the positive
    one, ``not_asked``) whether the framing "says how to fix it" explains it better than "says
    nothing" by more than :data:`SAYS_HOW_MARGIN`. When the majority of hint votes says yes, the
    next state's own words are the proposed hint."""

    template: str
    score_sections: tuple[tuple[str, int], ...]
    version: str
    not_asked: str  # the positive score label: its votes need no correction and skip the hint question

    def frames(self) -> Frames:
        return load_template(self.template, (*dict(self.score_sections), *HINT_SECTIONS))

    def cast(
        self, judge: Scorer, request: str, reply: str, next_state: NextState, ballot: Ballot, *, seed: int = 0
    ) -> tuple[str, str | None]:
        frames = self.frames()
        prefix, cont = context(request, reply, frames), continuation(next_state.text)
        for vote in range(ballot.m):
            self._vote(judge, frames, prefix, cont, vote, ballot)
        hint = hint_from_next_state(next_state.text) if majority(ballot.votes["hint"]) == 1 else None
        return self.version, hint

    def _vote(self, judge: Scorer, frames: Frames, prefix: str, cont: str, vote: int, ballot: Ballot) -> None:
        def best(sections: dict[str, int], prior: dict[str, float] | None = None) -> tuple[int, str]:
            # Every score yields to the chat and stops on the judge's stop event (Judge.continuation_logprob).
            found = {name: judge.continuation_logprob(prefix + frames.framing(name, vote), cont) for name in sections}
            return decide(found, sections, prior=prior)

        value, text = best(dict(self.score_sections))
        ballot.cast("score", value, f"{text} \\boxed{{{'+1' if value == 1 else '-1'}}}")
        if value == 1:  # a satisfied turn (a call that worked) needs no correction: not asked, counts as "no"
            ballot.cast("hint", 0, f"channel not asked ({self.not_asked})\nUseful: no")
            return
        says, text = best(HINT_SECTIONS, {"says-how yes": SAYS_HOW_MARGIN})
        ballot.cast("hint", says, f"{text}\nUseful: {'yes' if says else 'no'}")


TURN = ChannelMethod(TEMPLATE, tuple(SCORE_SECTIONS.items()), VERSION, "satisfied")
TOOL = ChannelMethod("tool_v1.txt", (("worked", 1), ("failed", -1)), "tool-v1-channel", "worked")
