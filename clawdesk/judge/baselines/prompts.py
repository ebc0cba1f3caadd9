"""The v1 judge prompts (a baseline, ``judge.method = "sampled"``): the template files rendered into chat messages.

The templates are package data (``clawdesk/judge/prompts/{kind}_{PROMPT_VERSION}.txt``), each with
a ``=== system ===`` and a ``=== user ===`` section. ``{{request}}``, ``{{reply}}``,
``{{next_state}}`` and ``{{next_role}}`` are filled in one pass (text filled in is never searched
for placeholders again), after :func:`clawdesk.judge.parse.neutralise` has made it inert, so
nothing a user wrote can close a fence or pose as the judge's score, verdict or hint.

The output formats the templates ask for are the ones :mod:`clawdesk.judge.parse` reads. The
templates themselves contain no complete marker, so a judge that only echoes its prompt casts an
invalid vote. Change a template's wording → bump ``PROMPT_VERSION`` and add new files, so logged
judgements stay tied to the prompt that produced them.
"""

from __future__ import annotations

import re
from importlib import resources

from clawdesk.errors import JudgeError
from clawdesk.judge.parse import neutralise

PROMPT_VERSION = "v1"
KINDS = ("score", "hint")

_SECTION = re.compile(r"^=== (system|user) ===\n", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def load_template(kind: str) -> str:
    """The raw text of the ``kind`` ("score" or "hint") template for :data:`PROMPT_VERSION`."""
    if kind not in KINDS:
        raise JudgeError(f"Unknown judge prompt kind {kind!r}: expected one of {', '.join(KINDS)}.")
    name = f"{kind}_{PROMPT_VERSION}.txt"
    try:
        return resources.files("clawdesk.judge").joinpath("prompts", name).read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise JudgeError(
            f"Judge prompt file clawdesk/judge/prompts/{name} is missing from the installed package; "
            "reinstall ClawDesk (pip install -e .)."
        ) from err


def score_messages(request: str, reply: str, next_state: str, next_role: str = "user") -> list[dict[str, str]]:
    """System + user messages asking for a +1 / 0 / -1 rating of ``reply`` from ``next_state``."""
    return _render("score", request=request, reply=reply, next_state=next_state, next_role=next_role)


def hint_messages(request: str, reply: str, next_state: str, next_role: str = "user") -> list[dict[str, str]]:
    """System + user messages asking whether ``next_state`` holds a hint for rewriting ``reply``."""
    return _render("hint", request=request, reply=reply, next_state=next_state, next_role=next_role)


def _render(kind: str, **values: str) -> list[dict[str, str]]:
    sections = _sections(kind)
    # The role is a word from our own code, but it sits outside the fences: keep it one plain line.
    values["next_role"] = " ".join(values["next_role"].split())
    safe = {key: neutralise(value) for key, value in values.items()}

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in safe:
            raise JudgeError(f"Judge prompt {kind}_{PROMPT_VERSION}.txt uses an unknown placeholder {{{{{key}}}}}.")
        return safe[key]

    return [
        {"role": "system", "content": sections["system"]},
        {"role": "user", "content": _PLACEHOLDER.sub(fill, sections["user"])},
    ]


def _sections(kind: str) -> dict[str, str]:
    parts = _SECTION.split(load_template(kind))
    # split() with one group gives ["preamble", "system", text, "user", text].
    found = dict(zip(parts[1::2], parts[2::2], strict=True))
    if set(found) != {"system", "user"} or parts[0].strip():
        raise JudgeError(
            f"Judge prompt {kind}_{PROMPT_VERSION}.txt must hold exactly a '=== system ===' and a "
            "'=== user ===' section; reinstall ClawDesk if the file was edited."
        )
    return {role: text.strip() for role, text in found.items()}
