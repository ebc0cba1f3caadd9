"""The judge as one interface: what a vote method is given, and what it gives back.

A reply is judged from its *next state*, :class:`NextState`: the user's next message (a turn) or
the results of the tool calls it made (a tool step). :meth:`clawdesk.judge.runner.Judge.vote`
takes the context (the request and the reply) and the next state and returns a :class:`Verdict`:
m score votes (+1 / 0 / −1), their majority (:attr:`Verdict.reward`) and an optional hindsight
hint. Turns and tool steps are judged through that one method.

Inside it, a :class:`VoteMethod` casts the votes into a :class:`Ballot` and proposes a hint. The
shipped method is the channel judge (:mod:`clawdesk.judge.channel`); the older methods that
``docs/learning.md`` compares it with live in :mod:`clawdesk.judge.baselines`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from clawdesk.config import JudgeConfig
from clawdesk.engine import Engine
from clawdesk.judge.parse import majority
from clawdesk.store.steps import ToolCallRecord

T = TypeVar("T")
JUDGE_PROMPT_CHUNK = 16  # tokens per prompt chunk of a judge call: a waiting chat reply is held up by at most one


@dataclass(frozen=True)
class NextState:
    """What followed a reply: the user's next message, or a tool step's call results.

    ``text`` is what a model reads. ``calls`` is set for a tool step (built by
    :func:`clawdesk.judge.tool_steps.next_state`): the calls' statuses decide the votes before any
    model does, and the model (when asked) judges with the tool framings. A next state without
    calls is judged as a turn whatever its ``role``; the role only names the speaker in the
    baselines' prompts (the judge set's tool cases are judged that way).
    """

    text: str
    role: str = "user"  # 'user' | 'tool'
    calls: tuple[ToolCallRecord, ...] = field(default=())

    @property
    def is_tool_step(self) -> bool:
        return bool(self.calls)


@dataclass(frozen=True)
class VoteProgress:
    turn_id: int
    kind: str  # 'score' | 'hint'
    done: int  # votes finished for this turn or step (score and hint together)
    total: int


@dataclass(frozen=True)
class Verdict:
    """What the judge made of one (context, next state): votes, the accepted hint, raw outputs."""

    prompt_version: str
    score_outputs: list[str]
    votes: list[int | None]
    hint_outputs: list[str]
    hint: str | None
    note: str = ""  # why a proposed hint was rejected, if one was

    @property
    def reward(self) -> int:
        return majority(self.votes)


class Ballot:
    """The votes of one verdict as they are cast: m score votes and m hint votes, each with its logged text.

    ``on_progress(done, total, kind)`` follows every vote (``total`` = 2m)."""

    def __init__(self, m: int, on_progress: Callable[[int, int, str], None] | None = None) -> None:
        self.m = m
        self.outputs: dict[str, list[str]] = {"score": [], "hint": []}
        self.votes: dict[str, list[int | None]] = {"score": [], "hint": []}
        self._on_progress = on_progress

    def cast(self, kind: str, vote: int | None, text: str) -> None:
        self.outputs[kind].append(text)
        self.votes[kind].append(vote)
        if self._on_progress is not None:
            self._on_progress(len(self.outputs["score"]) + len(self.outputs["hint"]), 2 * self.m, kind)


class Scorer(Protocol):
    """What a vote method may use of the judge (:class:`clawdesk.judge.runner.Judge`): its engine and
    settings, and model calls that wait while the chat is busy and raise
    :class:`~clawdesk.judge.runner.JudgeInterrupted` when judging is stopped."""

    engine: Engine
    config: JudgeConfig

    def continuation_logprob(self, prompt_text: str, continuation: str) -> float: ...

    def continuation_logprobs(self, prompt: list[int], conts: list[list[int]]) -> list[float]: ...

    def yielding(self, compute: Callable[[Callable[[], bool]], T | None]) -> T: ...


class VoteMethod(Protocol):
    """How votes are cast: m score votes and m hint votes into ``ballot``; returns (prompt version, proposed hint).

    The proposed hint still goes through :func:`clawdesk.judge.parse.hint_problem` in
    :meth:`~clawdesk.judge.runner.Judge.vote`. Every model call goes through ``judge``
    (:class:`Scorer`), so it yields to the chat and stops on the judge's stop event."""

    def cast(
        self, judge: Scorer, request: str, reply: str, next_state: NextState, ballot: Ballot, *, seed: int
    ) -> tuple[str, str | None]: ...
