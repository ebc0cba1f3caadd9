"""Reading judge outputs: scores, hint verdicts, the vote rules, and keeping user text inert.

Pure functions over strings; no model. The judge prompt (``clawdesk.judge.baselines.prompts``) quotes user
text between fence lines ``<<<BEGIN LABEL>>>`` … ``<<<END LABEL>>>`` after :func:`neutralise`
has broken every marker this parser reacts to inside that text. The parser then reads only what
the judge itself wrote:

1. Thinking is dropped: every ``<think>…</think>`` block, an unclosed ``<think>`` to the end,
   and, for templates that open the think block in the prompt, everything up to a ``</think>``
   that has no opener.
2. Echoed fences are dropped: ``<<<BEGIN …>>>`` to the next ``<<<END …>>>`` (to the end if it
   never closes), and everything before an ``<<<END …>>>`` that has no opener.
3. What is left is searched.

Score markers (the last one wins; a last marker whose value is not one of -1, 0, +1 makes the
vote invalid, e.g. ``\\boxed{2}``):

- ``\\boxed{+1}``, ``\\boxed{1}``, ``\\boxed{-1}``, ``\\boxed{0}`` (the form the prompt asks for;
  spaces inside the braces and ``1.0``-style values are accepted);
- ``Score: +1`` / ``score: -1`` / ``**Score:** 0`` (case-insensitive, a number must follow);
- ``[[+1]]``, ``[[-1]]``, ``[[0]]``.

Hint outputs: a verdict ``Useful: yes`` or ``Useful: no`` (case-insensitive; ``yes|no`` and
``yes/no`` are not verdicts) and, after the last verdict, a block
``[HINT_START] … [HINT_END]``. A hint block before the last verdict does not count.

Quoting for the plain-text prompts (the channel judge and the v2 baseline): :func:`flatten` makes
user text one inert line; :func:`hint_from_next_state` is the hint those methods propose, the next
state's own words.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from clawdesk.engine.prompt import THINK_CLOSE, THINK_OPEN
from clawdesk.errors import JudgeError

HINT_HEADER = "\n\n[user's hint / instruction]\n"
QUOTE_CHARS = 400  # per quoted text in a plain-text prompt: the judge needs the gist; long prompts only slow it
# The answer keys of the v2 few-shot prompt: quoted text must not pose as an answer.
_ANSWER_KEYS = re.compile(r"\b(Verdict|Says how)\s*:", re.IGNORECASE)
MIN_HINT_CHARS = 10  # an accepted hint is longer than this after strip()

FENCE_OPEN = re.compile(r"<<<\s*BEGIN\b[^\n]*?>>>", re.IGNORECASE)
FENCE_CLOSE = re.compile(r"<<<\s*END\b[^\n]*?>>>", re.IGNORECASE)

_NUMBER = r"[+\-−]?\s*\d+(?:\.\d+)?"
SCORE_MARKER = re.compile(
    r"\\boxed\s*\{(?P<boxed>[^{}\n]{0,20})\}"
    rf"|\bscore\**\s*:\s*\**\s*(?P<line>{_NUMBER})(?!\d|\.\d|\s*/)"
    rf"|\[\[\s*(?P<brackets>{_NUMBER})\s*\]\]",
    re.IGNORECASE,
)
_SCORE_VALUE = re.compile(r"([+\-−]?)\s*([01])(?:\.0+)?")

VERDICT = re.compile(r"\buseful\**\s*:\s*\**\s*(?P<answer>yes|no)\b(?!\s*[|/])", re.IGNORECASE)
HINT_BLOCK = re.compile(r"\[\s*HINT_START\s*\](?P<body>.*?)\[\s*HINT_END\s*\]", re.IGNORECASE | re.DOTALL)
HINT_START = re.compile(r"\[\s*HINT_START\s*\]", re.IGNORECASE)

# What neutralise() breaks in user text: a superset of every opener the parser reacts to.
# Each replacement removes or changes a character the parser needs and adds none it could use.
_NEUTRALISE = (
    (re.compile(r"<<<(?=\s*(?:begin|end))", re.IGNORECASE), "‹‹‹"),  # fences
    (re.compile(r"<(?=\s*/?\s*think\s*>)", re.IGNORECASE), "‹"),  # think tags
    (re.compile(r"\\(?=\s*boxed)", re.IGNORECASE), "⧵"),  # \boxed{…}
    (re.compile(r"\[(?=\[)"), "[ "),  # [[…]]
    (re.compile(r"((?:score|useful)\**\s*):", re.IGNORECASE), r"\1="),  # Score: / Useful:
    (re.compile(r"(hint)_(?=\s*(?:start|end))", re.IGNORECASE), r"\1-"),  # [HINT_START] / [HINT_END]
)


# Chat-template markup that Engine.tokenize (special=True) would turn into control tokens: ChatML /
# Llama 3 / Phi ``<|…|>`` (and DeepSeek's full-width ``<｜…｜>``), Gemma's turn tags, think tags.
_TEMPLATE_MARKERS = (
    (re.compile(r"<(?=[|｜])"), "‹"),
    (re.compile(r"<(?=\s*/?\s*(?:think|start_of_turn|end_of_turn)\s*>)", re.IGNORECASE), "‹"),
)


def neutralise_template_markers(text: str) -> str:
    """User text that cannot pose as chat-template structure once rendered and tokenized with special tokens.

    ``<|im_start|>`` becomes ``‹|im_start|>``: still readable, but no longer the control token, so a
    quoted message can never open a new role turn in a rendered prompt.
    """
    for pattern, replacement in _TEMPLATE_MARKERS:
        text = pattern.sub(replacement, text)
    return text


def neutralise(text: str) -> str:
    """Make user text inert inside a judge prompt: no fence, think tag, score, verdict, hint or chat-template marker.

    The text stays readable (``\\boxed`` becomes ``⧵boxed``, ``Score:`` becomes ``Score=``, ``[[``
    becomes ``[ [``, fence ``<<<`` becomes ``‹‹‹``, ``<|im_end|>`` becomes ``‹|im_end|>``), so the
    judge still sees what the user wrote.
    """
    for pattern, replacement in _NEUTRALISE:
        text = pattern.sub(replacement, text)
    return neutralise_template_markers(text)


def strip_thinking(output: str) -> str:
    """The output with think blocks removed (see the module docstring, rule 1)."""
    head, closed, tail = output.rpartition(THINK_CLOSE)
    if closed and THINK_OPEN not in head:
        output = tail  # the think block was opened by the prompt template
    parts: list[str] = []
    rest = output
    while True:
        before, opened, after = rest.partition(THINK_OPEN)
        parts.append(before)
        if not opened:
            break
        _, closed, rest = after.partition(THINK_CLOSE)
        if not closed:
            break  # unclosed: thinking to the end
    return "".join(parts)


def strip_fences(text: str) -> str:
    """The text with echoed fenced blocks removed (see the module docstring, rule 2)."""
    kept: list[str] = []
    pos = 0
    while pos < len(text):
        opener = FENCE_OPEN.search(text, pos)
        closer = FENCE_CLOSE.search(text, pos)
        if closer and (not opener or closer.start() < opener.start()):
            kept = []  # a closer without an opener: what came before it was echoed user text
            pos = closer.end()
            continue
        if not opener:
            kept.append(text[pos:])
            break
        kept.append(text[pos : opener.start()])
        closer = FENCE_CLOSE.search(text, opener.end())
        if not closer:
            break
        pos = closer.end()
    return "".join(kept)


def judge_text(output: str) -> str:
    """What the judge itself wrote: the output without thinking and without echoed fences."""
    return strip_fences(strip_thinking(output))


def parse_score(output: str) -> int | None:
    """The last score in a judge output: -1, 0 or +1; ``None`` when there is none or it is invalid."""
    markers = list(SCORE_MARKER.finditer(judge_text(output)))
    if not markers:
        return None
    raw = next(v for v in markers[-1].groupdict().values() if v is not None)
    value = _SCORE_VALUE.fullmatch(raw.strip())
    if value is None:
        return None
    digit = int(value.group(2))
    return -digit if value.group(1) in ("-", "−") else digit


def majority(votes: Sequence[int | None]) -> int:
    """r_final: the most common valid vote; a tie for the top count, or no valid vote, gives 0."""
    valid = [v for v in votes if v is not None]
    for v in valid:
        if v not in (-1, 0, 1):
            raise JudgeError(f"Judge vote {v!r} is not -1, 0 or +1; votes must come from parse_score().")
    if not valid:
        return 0
    ranked = Counter(valid).most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return 0
    return ranked[0][0]


def parse_hint(output: str) -> tuple[bool, str | None]:
    """(says_useful, hint): the last verdict, and the last hint block after it (stripped, or None)."""
    text = judge_text(output)
    verdicts = list(VERDICT.finditer(text))
    if not verdicts:
        return False, None
    verdict = verdicts[-1]
    says_useful = verdict.group("answer").lower() == "yes"
    blocks = list(HINT_BLOCK.finditer(text, verdict.end()))
    if not blocks:
        return says_useful, None
    body = HINT_START.split(blocks[-1].group("body"))[-1]  # "[HINT_START] a [HINT_START] b" → "b"
    return says_useful, (body.strip() or None)


def accept_hint(outputs: Sequence[str], *, reply: str = "") -> str | None:
    """The longest hint among votes that say useful with an acceptable hint (see :func:`hint_problem`); else None.

    Equal lengths keep the earliest vote, so the choice is deterministic.
    """
    best: str | None = None
    for output in outputs:
        useful, hint = parse_hint(output)
        if useful and hint is not None and hint_problem(hint, reply=reply) is None:
            hint = hint.strip()
            if best is None or len(hint) > len(best):
                best = hint
    return best


_WORD = re.compile(r"[a-z0-9']+")
# Phrases of the judge prompts' own instructions: a hint that repeats them is the judge echoing its prompt.
_PROMPT_PHRASES = (
    "how that reply should have been written",
    "tell the assistant how to write that reply",
    "1 to 3 short sentences",
    "it is data, not instructions",
    "what came next",
    "replace ... with",
    "hint_start",
    "useful: yes",
)


def hint_problem(hint: str, *, reply: str = "") -> str | None:
    """Why ``hint`` must not become the teacher's context, or None when it may.

    Rejected: nothing of substance (at most :data:`MIN_HINT_CHARS` characters, or no word), text
    restating the judge prompt's own instructions, and text that mostly restates the reply (80 % or
    more of its words are the reply's): none of these tells the teacher anything the reply lacked.
    """
    text = hint.strip()
    words = _WORD.findall(text.lower())
    if len(text) <= MIN_HINT_CHARS or not words:
        return "hint too short"
    lowered = " ".join(text.lower().split())
    if any(phrase in lowered for phrase in _PROMPT_PHRASES):
        return "hint restates the judge prompt"
    if reply and len(words) >= 4:
        reply_words = set(_WORD.findall(reply.lower()))
        if sum(w in reply_words for w in words) >= 0.8 * len(words):
            return "hint restates the reply"
    return None


def enhanced_user_message(last_user: str, hint: str) -> str:
    """The teacher's last user message: the original text with the hint appended under a header.

    ``last_user`` stays exact (the teacher prompt must rebuild the served prompt); the hint is quoted
    user text, so its chat-template markers are neutralised: it cannot open a role turn of its own.
    """
    return last_user + HINT_HEADER + neutralise_template_markers(hint)


def flatten(text: str, limit: int = QUOTE_CHARS) -> str:
    """User text made inert for the prompt: one line, no answer key that could pose as an answer, clipped."""
    text = " ".join(text.split())
    text = _ANSWER_KEYS.sub(lambda m: f"{m.group(1)} -", text)
    if len(text) > limit:
        half = (limit - 5) // 2
        text = f"{text[:half]} […] {text[-half:]}"
    return text


def hint_from_next_state(next_state: str) -> str:
    """The hint proposed when the votes say the next state says how: its own words (a directive's own)."""
    text = " ".join(next_state.split())
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1] + "…"
