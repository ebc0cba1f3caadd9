"""The eval's judges: the oracle, the ``shuffled`` and ``opd`` controls, and the self-judge's agreement count.

Each is a judge the learning loop calls (:class:`~clawdesk.judge.service.BacklogJudge`), so what it
returns is what the loop saves and trains on; nothing rewrites judgments after the loop:

- :class:`OracleJudge`: the reward from the phase's checks, the hint from the first failing
  persona, the teacher prompt built as the app builds it (:func:`clawdesk.judge.teacher.teacher_prompt`);
- :class:`ShuffledJudge`: the oracle's (reward, hint) pairs of one judging round permuted across
  its turns (:func:`shuffle_signals`, the same multiset): a control for drift from training at all;
- :class:`ZeroRewardJudge` (``opd``): any judge's judgment with the reward forced to 0, so only
  hinted turns become samples;
- :class:`ObservedJudge`: passes each judgment of a judge (the self-judge) to a callback before any
  control changes it: the eval counts its agreement with the simulated user there.
"""

from __future__ import annotations

import dataclasses
import random
import threading
from collections.abc import Callable

from clawdesk.engine import Engine
from clawdesk.errors import JudgeError
from clawdesk.judge.service import BacklogJudge
from clawdesk.store import Store
from clawdesk.store.judgments import Judgment, PendingTurn, pending_turns
from clawdesk.store.step_judgments import PendingStep, StepJudgment

Signal = tuple[int, str | None]  # (reward, hint)


def shuffle_signals(signals: list, seed: int, salt: int) -> list:
    """The ``shuffled`` control: the round's (reward, hint) pairs in a seeded random order (same multiset)."""
    out = list(signals)
    random.Random(seed * 7919 + salt).shuffle(out)
    return out


class OracleJudge:
    """Judges a turn from what the simulated user said of it: ``truth(turn_id)`` → (satisfied, hint)."""

    def __init__(self, engine: Engine, truth: Callable[[int], tuple[bool, str | None]]) -> None:
        self.engine = engine  # the served engine: the teacher prompt is rendered with it; never closed by the loop
        self.truth = truth
        self.stop = threading.Event()

    def signal(self, turn_id: int) -> Signal:
        """The oracle's (reward, hint): +1 and no hint when the reply satisfied the phase, else −1 and its hint."""
        satisfied, hint = self.truth(turn_id)
        return (1, None) if satisfied else (-1, hint)

    def judge(self, store: Store, pending: PendingTurn, *, on_progress=None) -> Judgment:
        return self.judgment(store, pending, self.signal(pending.turn.id))

    def judgment(self, store: Store, pending: PendingTurn, signal: Signal) -> Judgment:
        """The judgment that gives ``pending`` the (reward, hint) ``signal``, with its teacher prompt."""
        from clawdesk.judge.parse import enhanced_user_message
        from clawdesk.judge.teacher import teacher_prompt, turn_context

        reward, hint = signal
        enhanced = enhanced_user_message(pending.turn.user_content, hint) if hint else None
        ids, note = (None, "")
        if enhanced:
            ids, note = teacher_prompt(self.engine, turn_context(store, pending.turn), enhanced)
        return Judgment(
            turn_id=pending.turn.id, next_turn_id=pending.next_turn_id, prompt_version="oracle",
            judge_model_name="oracle", judge_model_sha256=self.engine.identity.sha256, score_outputs=[],
            votes=[reward], reward=reward, hint_outputs=[], hint=hint, enhanced_user=enhanced,
            enhanced_prompt_ids=ids, seconds=0.0, note=note,
        )  # fmt: skip

    def judge_step(self, store: Store, pending: PendingStep, *, on_progress=None) -> StepJudgment:
        raise JudgeError("the eval's oracle judges turns only; the eval's chat has no tools")


class _Wrapper:
    """A judge around ``inner``: its engine, stop flag and tool steps are the inner judge's."""

    def __init__(self, inner: BacklogJudge) -> None:
        self.inner = inner

    @property
    def engine(self) -> Engine:
        return self.inner.engine

    @property
    def stop(self) -> threading.Event:
        return self.inner.stop

    def judge_step(self, store: Store, pending: PendingStep, *, on_progress=None) -> StepJudgment:
        return self.inner.judge_step(store, pending, on_progress=on_progress)


class ShuffledJudge(_Wrapper):
    """The oracle with its signals permuted across each round's turns.

    A round is the turns pending when the loop asks for the first of them (the loop judges oldest
    first, so that is one :meth:`LearningLoop.judge_pending`); ``salt()`` varies the order per round.
    """

    def __init__(self, oracle: OracleJudge, seed: int, salt: Callable[[], int]) -> None:
        super().__init__(oracle)  # its engine, stop flag and tool steps are the oracle's
        self.oracle = oracle
        self.seed = seed
        self.salt = salt
        self._round: dict[int, Signal] = {}

    def judge(self, store: Store, pending: PendingTurn, *, on_progress=None) -> Judgment:
        if pending.turn.id not in self._round:  # a new round: every pending turn's signal, shuffled at once
            turns = [p.turn.id for p in pending_turns(store)]
            signals = shuffle_signals([self.oracle.signal(t) for t in turns], self.seed, self.salt())
            self._round = dict(zip(turns, signals, strict=True))
        return self.oracle.judgment(store, pending, self._round.pop(pending.turn.id))


class ZeroRewardJudge(_Wrapper):
    """``opd``: the inner judge's judgment with reward 0, so only its hinted turns become (OPD) samples."""

    def judge(self, store: Store, pending: PendingTurn, *, on_progress=None) -> Judgment:
        return dataclasses.replace(self.inner.judge(store, pending, on_progress=on_progress), reward=0)


class ObservedJudge(_Wrapper):
    """The inner judge, with ``on_judged(pending, judgment)`` told of each judgment it makes."""

    def __init__(self, inner: BacklogJudge, on_judged: Callable[[PendingTurn, Judgment], None]) -> None:
        super().__init__(inner)
        self.on_judged = on_judged

    def judge(self, store: Store, pending: PendingTurn, *, on_progress=None) -> Judgment:
        judgment = self.inner.judge(store, pending, on_progress=on_progress)
        self.on_judged(pending, judgment)
        return judgment
