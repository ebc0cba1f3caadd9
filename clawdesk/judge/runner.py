"""The judge: votes on a reply from its next state, on the base weights; judgments of turns and tool steps.

:meth:`Judge.vote` is the one interface (:mod:`clawdesk.judge.vote`): the context (request,
reply) and the next state (the user's next message, or a tool step's results) give m votes, their
majority and an optional hint. :meth:`Judge.judge` (a turn) and :meth:`Judge.judge_step` (a tool
step) call it and add the teacher prompt (:mod:`clawdesk.judge.teacher`). A tool step's call
statuses decide first (:mod:`clawdesk.judge.tool_steps`); otherwise the vote method casts the
votes: the shipped channel judge (:data:`clawdesk.judge.channel.TURN`, and
:data:`~clawdesk.judge.channel.TOOL` for tool results), or for turns a baseline of
:mod:`clawdesk.judge.baselines` when ``judge.method`` names one.

The judge shares the llama.cpp engine with the chat, so it yields: before every model call and
between every token it checks :class:`ChatGate`; while the chat is busy it stops, waits, and
resumes the same call (the prompt prefix stays cached when the chat did not evict it). The judge
always runs with the adapter disabled (``use_adapter=False``), so the policy never grades itself
with what it learned. Build one with :func:`clawdesk.runtime.load_judge` (it honours
``judge.model``); tests and benchmarks may call the constructor directly.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from clawdesk.config import JudgeConfig
from clawdesk.engine import Engine
from clawdesk.engine.gate import ChatGate
from clawdesk.judge import channel
from clawdesk.judge.parse import enhanced_user_message, hint_from_next_state, hint_problem, majority
from clawdesk.judge.teacher import ServedContext, step_context, teacher_prompt, turn_context
from clawdesk.judge.tool_steps import cast_rules, next_state
from clawdesk.judge.vote import JUDGE_PROMPT_CHUNK, Ballot, NextState, Verdict, VoteMethod, VoteProgress
from clawdesk.store import Store
from clawdesk.store.judgments import Judgment, PendingTurn
from clawdesk.store.pref_topics import aspect
from clawdesk.store.step_judgments import PendingStep, StepJudgment
from clawdesk.store.turn_memory import turn_memory_block

__all__ = ["JUDGE_PROMPT_CHUNK", "Judge", "JudgeInterrupted", "Verdict", "VoteProgress", "method_for"]

T = TypeVar("T")


class JudgeInterrupted(Exception):
    """Judging was stopped (learning turned off or the app is closing); nothing was saved."""


def method_for(config: JudgeConfig) -> VoteMethod:
    """The vote method for turns: the shipped channel judge, or the baseline ``judge.method`` names."""
    if config.method == "channel":
        return channel.TURN
    # The older methods are measured against the channel judge in docs/learning.md; they are
    # imported only when asked for, so the shipped path never loads them.
    from clawdesk.judge.baselines import baseline

    return baseline(config)


class Judge:
    """Judges with ``engine`` (base weights). ``policy`` renders the teacher prompt.

    ``policy`` is the served engine: the enhanced prompt must use the served model's template and
    tokenizer even when a different GGUF judges (``judge.model``). ``method`` overrides the vote
    method that ``config.method`` picks (:func:`method_for`).
    """

    def __init__(
        self,
        engine: Engine,
        config: JudgeConfig,
        *,
        policy: Engine | None = None,
        gate: ChatGate | None = None,
        stop: threading.Event | None = None,
        method: VoteMethod | None = None,
    ) -> None:
        self.engine = engine
        self.policy = policy or engine
        self.config = config
        self.gate = gate or ChatGate()
        self.stop = stop or threading.Event()
        self.method = method or method_for(config)

    # -- the interface ---------------------------------------------------------------------

    def vote(
        self,
        request: str,
        reply: str,
        next_state: NextState,
        *,
        seed: int = 0,
        on_progress: Callable[[int, int, str], None] | None = None,
    ) -> Verdict:
        """m score votes and m hint votes on one (request, reply, next state), and the accepted hint.

        A tool step's calls are judged by the rules when their statuses say it all, else by the
        channel judge with the tool framings (whatever ``judge.method`` says); a turn by
        ``self.method``. ``seed`` varies sampled votes; ``on_progress(done, total, kind)`` follows
        every vote. No store needed.
        """
        ballot = Ballot(self.config.votes, on_progress)
        cast = None
        if next_state.is_tool_step:
            cast = cast_rules(next_state.calls, ballot, evidence=self.config.tool_evidence, request=request)
        if cast is None:
            method = channel.TOOL if next_state.is_tool_step else self.method
            cast = method.cast(self, request, reply, next_state, ballot, seed=seed)
        version, hint = cast
        note = ""
        if hint is None and (wish := self._form_wish(next_state, ballot)):
            hint = hint_from_next_state(next_state.text)
            note = f"hint taken as a wish about {wish} (judge.form_hints)"
        if hint is not None and (problem := hint_problem(hint, reply=reply)):
            hint, note = None, problem
        return Verdict(version, ballot.outputs["score"], ballot.votes["score"], ballot.outputs["hint"], hint, note)

    def _form_wish(self, next_state: NextState, ballot: Ballot) -> str | None:
        """The aspect of a reply's form that a message judged unsatisfied names, if any: such a message
        says how the reply should have been, whatever the directive votes said (``judge.form_hints``,
        channel only). None when the rule does not apply.

        Why: the demo judge accepted a hint on 0.20-0.38 of the unsatisfied replies of ``no-lists``,
        so a person's "please don't use lists" became a memory item only after 12-23 interactions.
        """
        applies = (
            self.config.form_hints
            and self.method is channel.TURN
            and not next_state.is_tool_step
            and majority(ballot.votes["score"]) == -1
        )
        return aspect(next_state.text) if applies else None

    def _teacher(
        self, verdict: Verdict, user_content: str, context: Callable[[], ServedContext]
    ) -> tuple[str | None, list[int] | None, str]:
        """(enhanced user message, teacher prompt ids, note) for an accepted hint; the context is only
        built when there is one. A teacher prompt that cannot be built is said in the note."""
        if verdict.hint is None:
            return None, None, verdict.note
        enhanced_user = enhanced_user_message(user_content, verdict.hint)
        ids, problem = teacher_prompt(self.policy, context(), enhanced_user)
        return enhanced_user, ids, "; ".join(x for x in (verdict.note, problem) if x)

    def judge(
        self, store: Store, pending: PendingTurn, *, on_progress: Callable[[VoteProgress], None] | None = None
    ) -> Judgment:
        """A turn judged from the user's next message, with its teacher prompt when a hint was accepted."""
        started = time.monotonic()
        turn = pending.turn
        verdict = self.vote(
            turn.user_content, turn.reply_content, NextState(pending.next_state, pending.next_role),
            seed=turn.id, on_progress=_progress(turn.id, on_progress),
        )  # fmt: skip
        enhanced_user, enhanced_ids, note = self._teacher(verdict, turn.user_content, lambda: turn_context(store, turn))
        ident = self.engine.identity
        return Judgment(
            turn_id=turn.id,
            next_turn_id=pending.next_turn_id,
            prompt_version=verdict.prompt_version,
            judge_model_name=ident.name,
            judge_model_sha256=ident.sha256,
            score_outputs=verdict.score_outputs,
            votes=verdict.votes,
            reward=majority(verdict.votes),
            hint_outputs=verdict.hint_outputs,
            hint=verdict.hint,
            enhanced_user=enhanced_user,
            enhanced_prompt_ids=enhanced_ids,
            seconds=time.monotonic() - started,
            note=note,
        )

    def judge_step(
        self, store: Store, pending: PendingStep, *, on_progress: Callable[[VoteProgress], None] | None = None
    ) -> StepJudgment:
        """A tool step judged from its calls' results, with its teacher prompt when a hint was accepted.

        ``store`` gives the turn's memory block (a step's served prompt is in ``pending``)."""
        started = time.monotonic()
        turn, step = pending.turn, pending.step
        progress = _progress(turn.id, on_progress)
        verdict = self.vote(turn.user_content, step.reply_content, next_state(pending.calls), on_progress=progress)
        _, enhanced, note = self._teacher(
            verdict, turn.user_content,
            lambda: step_context(turn, step.prompt_ids, pending.first_prompt_ids, turn_memory_block(store, turn.id)),
        )  # fmt: skip
        ident = self.engine.identity
        return StepJudgment(
            step_id=step.id,
            prompt_version=verdict.prompt_version,
            judge_model_name=ident.name,
            judge_model_sha256=ident.sha256,
            score_outputs=verdict.score_outputs,
            votes=verdict.votes,
            hint_outputs=verdict.hint_outputs,
            hint=verdict.hint,
            enhanced_prompt_ids=enhanced,
            seconds=time.monotonic() - started,
            note=note,
        )

    # -- model calls that yield to the chat (the Scorer of clawdesk.judge.vote) ---------------

    def continuation_logprob(self, prompt_text: str, continuation: str) -> float:
        """log p(continuation | prompt_text) on the base weights (plain text, no chat template)."""
        prompt = self.engine.tokenize_plain(prompt_text, bos=True)
        cont = self.engine.tokenize_plain(continuation)
        return self.continuation_logprobs(prompt, [cont])[0]

    def continuation_logprobs(self, prompt: list[int], conts: list[list[int]]) -> list[float]:
        """log p of each continuation after ``prompt`` (token ids), on the base weights."""
        return self.yielding(
            lambda stop_when: self.engine.continuation_logprobs(
                prompt, conts, stop_when=stop_when, prompt_chunk=JUDGE_PROMPT_CHUNK
            )
        )

    def yielding(self, compute: Callable[[Callable[[], bool]], T | None]) -> T:
        """Run ``compute(stop_when)`` whenever the chat is idle until it gives a result.

        ``compute`` runs one native call that polls ``stop_when`` and returns None when it
        stopped for the chat (it is then retried once the chat is idle; the cached prefix makes
        that cheap). Raises :class:`JudgeInterrupted` when judging is stopped.
        """
        while True:
            self.gate.wait_idle(self.stop)
            if self.stop.is_set():
                raise JudgeInterrupted
            with self._computing():
                found = compute(lambda: self.gate.busy or self.stop.is_set())
            if found is not None:
                return found

    def _computing(self) -> contextlib.AbstractContextManager[None]:
        """Marks the served engine's threads busy while a judge on *another* engine computes.

        On the served engine itself nothing is marked: the engine lock already keeps the judge and
        the chat from computing at once (see :class:`~clawdesk.engine.llama.ThreadBudget`). Only
        the native call is covered, not the wait for the chat, so a waiting judge costs no cores.
        """
        if self.engine is self.policy:
            return contextlib.nullcontext()
        return self.policy.threads.busy_while("judge")


def _progress(
    turn_id: int, on_progress: Callable[[VoteProgress], None] | None
) -> Callable[[int, int, str], None] | None:
    if on_progress is None:
        return None
    return lambda done, total, kind: on_progress(VoteProgress(turn_id, kind, done, total))
