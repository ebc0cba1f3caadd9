"""Standing, one-off or praise: does an accepted hint say how replies should be *in general*?

A hint the judge accepted is the user's own words ("Keep answers short", "I meant Paris,
France"). The preference memory keeps only the *standing* ones (how every reply should be);
a *one-off* correction fixes this one reply and must not follow the user into other chats, and
*praise* ("Lovely, that reads really naturally.") asks for nothing: the demo judge scores some
praise −1 with a hint, and such an item then sat in every prompt (docs/learning.md).
:func:`classify_hint` decides with the engine, the channel way (:mod:`clawdesk.judge.channel`):
the hint is scored as the continuation of three framings, ::

    A user asked an assistant: {request}
    The user stated a general preference for all future answers: <hint>     log p = s
    The user corrected a detail of this one answer: <hint>                    log p = o
    The user liked the answer and replied: <hint>                             log p = r

and vote i uses the i-th paraphrase of each (``clawdesk/judge/prompts/standing_v2.txt``). The
framings score the same tokens, so what decides is how well each account explains the user's
words. Praise when the mean of r beats the means of s and o, or comes within :data:`PRAISE_SLACK`
nats of the better; otherwise the sign of the mean margin s − o over the votes, ``"standing"`` or
``"one-off"``, or ``"unsure"`` when it is within :data:`UNSURE_MARGIN` nats of zero (the caller
lets the user decide).

One rule comes before the votes' answer: a hint that says the reply did not answer the question
("That doesn't answer my question.", "Not what I asked.") is a one-off (:func:`misses_question`).
The framings read such a complaint as a general wish, and kept as an item it sat after every later
question, where the demo model wrote it back as its whole reply (stop 37, docs/learning.md).
A second: thanks that ask for nothing ("Good, no fluff. Thank you.") are praise
(:func:`only_thanks`). The demo judge scored that message −1, took it for a length wish ("fluff"),
and the votes kept it; as an item it replaced the person's real length wish and the model answered
it ("Aw, aw, aw! Good, no fluff!", stop 38).
Measured on ``assets/judge-set-standing.jsonl`` by ``clawdesk eval --judge-set``, and on the shipped
personas' feedback (held out) by ``bench/hint_kinds.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from clawdesk.engine import Engine
from clawdesk.errors import InputError, JudgeError
from clawdesk.judge.channel import context, continuation, load_template
from clawdesk.preferences import HintKind  # the memory's own list of kinds: one definition
from clawdesk.store.pref_topics import without_quotes

TEMPLATE = "standing_v2.txt"
VERSION = "standing-v2-channel"
LABELS = ("standing", "one-off", "praise")
DEFAULT_VOTES = 3  # when given a bare engine (a judge brings its own judge.votes)
# Below this mean margin (nats) between the two framings the classifier says "unsure": a small
# model's margins near zero are noise, and an unsure hint costs the user one question, while a
# wrong "standing" puts a one-off correction into every later prompt. Set from a run on
# assets/judge-set-standing.jsonl (docs/learning.md): 0.5 made 6 of 38 unsure, 0.25 made 2.
UNSURE_MARGIN = 0.25
# Praise wins a near tie: within this many nats of the better of the other two framings it is still
# taken for praise. The costs are not even: thanks kept as an item sit in every prompt until learned
# or removed, while a correction taken for praise costs nothing the person will not say again. The
# self-judged eval's first thanks item came from a margin of −0.01 ("Lovely, that reads really
# naturally.", docs/learning.md); on the judge set no standing case is within 0.5 nats.
PRAISE_SLACK = UNSURE_MARGIN
# "The reply did not answer": does/did/has/have + not + answer/address (not "don't answer", which
# states a wish: "Don't answer with lists"), "not what I asked", "nothing to do with my question",
# "ignored my question". English only, like the aspect lexicon of store/pref_topics.py.
_MISSED = re.compile(
    r"\b(?:does|did|has|have)(?:n['’]?t|\s+not)\s+(?:really\s+|actually\s+|even\s+)?(?:answer|address)"
    r"|\bnot what i (?:asked|meant|wanted)"
    r"|\bnothing to do with (?:my|what i|the question)"
    r"|\b(?:ignored|missed|dodged|skipped) (?:my|the) question",
    re.IGNORECASE,
)

# Thanks: a word of gratitude outside quoted text ("sign them 'Cheers, Sam'" is a wish about the
# reply's words), with a word of approval ("No lists, thanks." is a polite request; "Good, no fluff.
# Thank you." says the reply had none). Asks: what turns thanks into a request ("Thanks, but next
# time ...", "please", "don't", a question). English only.
_APPROVAL_WORDS = (
    r"good|great|perfect|perfectly|exactly|love|loved|nice|lovely|awesome|excellent|brilliant|fantastic"
    r"|wonderful|spot on|helpful|helped|worked|works|clear|that['’]?s all|just what|just right"
)
_APPROVES = re.compile(rf"\b(?:{_APPROVAL_WORDS})\b", re.IGNORECASE)
# An approval word negated is a complaint: "That's no good, thanks.", "Not very helpful, thanks.",
# "That wasn't clear, thanks." (polite words around a correction that only_thanks must not drop).
_NEGATED_APPROVAL = re.compile(
    rf"\b(?:no|not|never|hardly|cannot|\w+n['’]t)\s+(?:(?:very|so|really|that|too|quite|at all)\s+)?"
    rf"(?:{_APPROVAL_WORDS})\b",
    re.IGNORECASE,
)
_THANKS = re.compile(r"\b(?:thank(?:s| you)?|thx|cheers|much appreciated|appreciate (?:it|that))\b", re.IGNORECASE)
_ASKS = re.compile(
    r"\?|\b(?:but|however|though|although|except|please|pls|next time|in (?:the )?future|from now on|going forward"
    r"|always|never|don['’]?t|do not|could you|can you|would you|should|instead|rather|make sure|remember)\b",
    re.IGNORECASE,
)


class _LogprobJudge(Protocol):
    """What of a :class:`~clawdesk.judge.runner.Judge` is used: its scorer that yields to the chat."""

    def continuation_logprob(self, prompt_text: str, continuation: str) -> float: ...


@dataclass(frozen=True)
class HintClass:
    """The decision with its evidence: per vote, log p(standing framing) − log p(one-off framing); and
    mean log p(praise) − the larger of the other two means (above −:data:`PRAISE_SLACK`: praise)."""

    kind: HintKind
    margins: tuple[float, ...]
    praise_margin: float | None = None
    rule: str = ""  # "missed-question" (:func:`misses_question`) or "thanks" (:func:`only_thanks`): a rule decided

    @property
    def mean_margin(self) -> float:
        return sum(self.margins) / len(self.margins)


def classify_hint(
    engine_or_judge: Engine | _LogprobJudge, hint_text: str, request: str, next_message: str = ""
) -> HintKind:
    """``"standing"``, ``"one-off"``, ``"praise"`` or ``"unsure"`` for an accepted hint (see the module docstring).

    ``engine_or_judge``: a :class:`~clawdesk.judge.runner.Judge` (its calls yield to the chat and
    stop with it, :class:`~clawdesk.judge.runner.JudgeInterrupted`; ``judge.votes`` votes) or a
    bare :class:`~clawdesk.engine.Engine` (base weights, :data:`DEFAULT_VOTES` votes).
    ``hint_text`` is the accepted hint, ``request`` the user message of the judged turn,
    ``next_message`` the user's message the hint came from (quoted before the hint when it is
    more than the hint itself). Raises :class:`~clawdesk.errors.InputError` for an empty hint.
    """
    return classify_hint_votes(engine_or_judge, hint_text, request, next_message).kind


def classify_hint_votes(
    engine_or_judge: Engine | _LogprobJudge, hint_text: str, request: str, next_message: str = ""
) -> HintClass:
    """:func:`classify_hint` with its per-vote margins (for the judge set and the logs)."""
    if not hint_text.strip():
        raise InputError("classify_hint needs the hint's text; it was empty")
    score, votes = _scorer(engine_or_judge)
    frames = load_template(TEMPLATE, LABELS)
    prefix = context(request, "", frames)
    extra = " ".join(next_message.split())
    if extra and extra != " ".join(hint_text.split()):
        prefix += f"The user wrote: {continuation(extra).strip()}\n"
    cont = continuation(hint_text)
    found = {label: [score(prefix + frames.framing(label, i), cont) for i in range(votes)] for label in LABELS}
    margins = tuple(s - o for s, o in zip(found["standing"], found["one-off"], strict=True))
    mean = {label: sum(values) / votes for label, values in found.items()}
    praise_margin = mean["praise"] - max(mean["standing"], mean["one-off"])
    kind = decide(margins, praise_margin)
    if kind in ("standing", "unsure") and misses_question(hint_text):
        return HintClass("one-off", margins, praise_margin, rule="missed-question")
    if kind in ("standing", "unsure") and only_thanks(hint_text):
        return HintClass("praise", margins, praise_margin, rule="thanks")
    return HintClass(kind, margins, praise_margin)


def misses_question(hint_text: str) -> bool:
    """Whether the hint says the reply did not answer the question: a correction of that reply, a one-off."""
    return _MISSED.search(hint_text) is not None


def only_thanks(hint_text: str) -> bool:
    """Whether the hint thanks and approves of the reply and asks for nothing: praise, whatever form words it has."""
    plain = _NEGATED_APPROVAL.sub(" ", without_quotes(hint_text))
    return all(p.search(plain) for p in (_THANKS, _APPROVES)) and _ASKS.search(plain) is None


def decide(
    margins: Sequence[float],
    praise_margin: float | None = None,
    unsure_margin: float = UNSURE_MARGIN,
    praise_slack: float = PRAISE_SLACK,
) -> HintKind:
    """The kind the per-vote margins give: ``praise`` when ``praise_margin`` > −``praise_slack``, else
    the sign of the margins' mean, ``unsure`` within ``unsure_margin`` of 0.

    A one-off taken for praise costs nothing (neither makes an item); a correction taken for praise
    is measured on the shipped personas' feedback (``bench/hint_kinds.py``, docs/learning.md).

    The mean, not a majority of signs: one paraphrase pair often leans hard one way on its own
    (a margin of 10 nats for one vote and −2 for another), and the mean weighs how sure each is."""
    if not margins:
        raise ValueError("decide() needs at least one vote")
    if praise_margin is not None and praise_margin > -praise_slack:
        return "praise"
    mean = sum(margins) / len(margins)
    if abs(mean) < unsure_margin:
        return "unsure"
    return "standing" if mean > 0 else "one-off"


def _scorer(engine_or_judge: Engine | _LogprobJudge) -> tuple[Callable[[str, str], float], int]:
    """(log p(continuation | prompt text), number of votes) for a judge or a bare engine."""
    if isinstance(engine_or_judge, Engine):
        engine = engine_or_judge

        def score(prompt_text: str, cont: str) -> float:
            found = engine.continuation_logprobs(
                engine.tokenize_plain(prompt_text, bos=True), [engine.tokenize_plain(cont)]
            )
            if found is None:  # only a stop_when stops it, and none is given
                raise JudgeError("the engine stopped scoring a hint without being asked to")
            return found[0]

        return score, DEFAULT_VOTES
    config = getattr(engine_or_judge, "config", None)
    return engine_or_judge.continuation_logprob, getattr(config, "votes", DEFAULT_VOTES)
