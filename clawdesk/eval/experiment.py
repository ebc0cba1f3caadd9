"""The simulated-user experiment: one scenario (or one persona), one learning method, held-out scores.

A run walks a :class:`~clawdesk.eval.scenarios.Scenario` phase by phase (a ``--persona`` run is a
one-phase scenario). One interaction is a new chat session (one session per task, as in the paper):
the phase's next training prompt → the served reply (sampled, adapter on, exactly as the chat
serves it) → the simulated user's satisfied/unsatisfied message, recorded as the next turn (its own
reply is not generated: it is the next state and nothing more). Each phase is scored at its start
(with the adapter served then) and after every training round on its own held-out set.

The learning is the app's own :class:`~clawdesk.loop.LearningLoop`, built by
:func:`clawdesk.runtime.build_learning_loop` in its synchronous mode and driven at fixed points:
every ``train_every`` interactions, and at the end of every phase, the eval calls
:meth:`~clawdesk.loop.LearningLoop.judge_pending` (the loop's judge pass over what is pending) and
then :meth:`~clawdesk.loop.LearningLoop.train_ready` (as many versions as full batches are ready,
validated, and the newest ready one hot-swapped in with :class:`~clawdesk.reload.AdapterSwitch`).
The eval subscribes to the loop's events: its progress lines are rendered from them, and a round is
scored when a :class:`~clawdesk.loop.VersionServed` names a new version (otherwise the same weights
are served and the last point repeats).

What the eval injects keeps its numbers reproducible and comparable across methods: the judge
(``self``: the app's, from ``runtime.load_judge``; ``oracle``: reward from the phase's checks, hint
from the first failing persona; the ``shuffled`` and ``opd`` controls wrap it, see
:mod:`clawdesk.eval.judges`), and the trainer, an :class:`~clawdesk.loop.trainers.InProcessTrainer`:
one seeded :class:`~clawdesk.learn.learner.Learner` kept across steps (its LoRA init and AdamW
moments carry over, the base is loaded once per run) on every core, where the chat's loop launches
an unseeded, niced trainer process per step. Synchronous judging makes which turns a step sees
independent of timing. Everything lives in a fresh data dir under the output dir, never the user's.

Methods: ``combined`` (the app), ``binary`` (w_opd = 0), ``opd`` (w_binary = 0, hinted samples
only), ``off`` (no training), ``shuffled`` (combined on the oracle's rewards and hints permuted
across the turns of each training round: a control for drift from training at all; it judges once per
round even with the memory on, so its items are noted at the round's end).
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawdesk.config import Config
from clawdesk.dirlock import try_lock
from clawdesk.errors import InputError, TrainError
from clawdesk.eval.judges import ObservedJudge, OracleJudge, ShuffledJudge, ZeroRewardJudge, shuffle_signals
from clawdesk.eval.scenarios import TARGET, Phase, Scenario, interactions_to_target, retention
from clawdesk.eval.scoring import Scorer
from clawdesk.loop import (
    JudgeProgress,
    SwapFailed,
    TrainingFailed,
    TrainingFinished,
    TrainingProgress,
    TrainingSkipped,
    VersionRejected,
    VersionServed,
)

METHODS = ("off", "shuffled", "binary", "opd", "combined")
JUDGES = ("oracle", "self")
__all__ = ["JUDGES", "METHODS", "TARGET", "Agreement", "EvalEvent", "EvalOptions", "Experiment", "shuffle_signals"]


@dataclass(frozen=True)
class EvalOptions:
    method: str = "combined"
    judge: str = "self"
    train_every: int = 16
    batch_size: int = 16
    seed: int = 0
    max_reply_tokens: int = 160

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise InputError(f"--method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.judge not in JUDGES:
            raise InputError(f"--judge must be oracle or self, got {self.judge!r}")
        for name in ("train_every", "batch_size", "max_reply_tokens"):
            if getattr(self, name) < 1:
                raise InputError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")

    @property
    def effective_judge(self) -> str:
        return "oracle" if self.method == "shuffled" else self.judge  # shuffled permutes the oracle's signals

    def judges_at_once(self, memory_on: bool) -> bool:
        """Judge right after every interaction (the memory's "acts at the next reply") or once per round.

        ``shuffled`` always judges per round: judged at once, each round would hold one turn and the
        permutation would change nothing (the control was the combined run, number for number, at stop 40).
        Its items are therefore noted at the round's end, not at once."""
        return memory_on and self.method != "shuffled"


@dataclass(frozen=True)
class EvalEvent:
    """Progress of a run: ``phase`` is 'interact', 'judge', 'train', 'score' or 'done'.

    ``source``: the learning loop's event it renders (judge and train lines), None for the eval's own."""

    phase: str
    done: int
    total: int
    message: str = ""
    source: object = None


class _Round:
    """The learning loop's events of one judge-and-train round, rendered as eval progress as they arrive."""

    def __init__(self, emit: Callable[[EvalEvent], None]) -> None:
        self.emit = emit
        self.begin(0, None)

    def begin(self, to_judge: int, serving: int | None) -> None:
        self.to_judge, self.serving_before = to_judge, serving
        self.served: int | None = None  # a new version the loop swapped in this round
        self.failed = ""

    def __call__(self, ev) -> None:
        line = ""
        if isinstance(ev, JudgeProgress):
            if not ev.judging:  # a turn was judged (or the backlog read): the bar moves
                done = max(self.to_judge - ev.ready, 0)
                self.emit(EvalEvent("judge", done, max(self.to_judge, 1), source=ev))
            return
        if isinstance(ev, TrainingProgress):
            self.emit(EvalEvent("train", ev.step, max(ev.steps, 1), ev.message, source=ev))
            return
        if isinstance(ev, TrainingSkipped):
            line = ev.reason
        elif isinstance(ev, TrainingFinished):
            made = ", ".join(f"v{v}" for v in ev.versions)
            line = f"trained {made}" if made else f"no version made: {ev.message}"
        elif isinstance(ev, VersionRejected):
            line = f"v{ev.version} rejected, not served: {ev.note}"
        elif isinstance(ev, VersionServed):
            if ev.version is not None and ev.version != self.serving_before:
                self.served = ev.version
            line = ev.message
        elif isinstance(ev, SwapFailed):
            line = f"not served: {ev.error}"
        elif isinstance(ev, TrainingFailed):
            self.failed = line = ev.error or "the training run failed"
        if line:
            self.emit(EvalEvent("train", 1, 1, line, source=ev))


@dataclass
class _Turn:
    turn_id: int
    satisfied: bool  # what the phase's checks say of the served reply
    hint: str | None  # the oracle's hint: the first failing persona's
    phase: int


@dataclass
class Agreement:
    """How the self-judge's signals match the simulated user's truth (counted per turn)."""

    n: int = 0
    agree: int = 0
    hinted_unsat: int = 0
    n_unsat: int = 0
    hinted_sat: int = 0
    n_sat: int = 0

    def count(self, reward: int, hinted: bool, satisfied: bool) -> None:
        self.n += 1
        self.agree += reward == (1 if satisfied else -1)
        if satisfied:
            self.n_sat, self.hinted_sat = self.n_sat + 1, self.hinted_sat + hinted
        else:
            self.n_unsat, self.hinted_unsat = self.n_unsat + 1, self.hinted_unsat + hinted

    def result(self) -> dict[str, Any]:
        return {
            "n_turns": self.n,
            "reward_agreement": self.agree / self.n if self.n else None,
            "hint_rate_unsatisfied": self.hinted_unsat / self.n_unsat if self.n_unsat else None,
            "hint_rate_satisfied": self.hinted_sat / self.n_sat if self.n_sat else None,
        }


@dataclass
class Experiment:
    """One run of one method on one scenario; :meth:`run` returns the ``result.json`` dict."""

    config: Config  # the user's config: learning settings to start from (its home is never touched)
    scenario: Scenario
    options: EvalOptions
    out_dir: Path
    model_spec: str | None = None
    on_event: Callable[[EvalEvent], None] = lambda _e: None
    _turns: list[_Turn] = field(default_factory=list)
    _by_id: dict[int, _Turn] = field(default_factory=dict)
    _agreement: Agreement = field(default_factory=Agreement)
    _phase_agreement: dict[int, Agreement] = field(default_factory=dict)
    _neutral: list | None = None  # the neutral set's (prompt, reply) ids, tokenized once
    _memory: Any = None  # [memory hook] the run's clawdesk.eval.memory.MemoryRun

    def run(self) -> dict[str, Any]:
        """The whole run (result.json's keys), holding ``out_dir`` so that a second eval cannot delete its data dir."""
        claim = claim_out_dir(self.out_dir)
        try:
            return self._run()
        finally:
            claim.close()

    def _run(self) -> dict[str, Any]:
        from clawdesk.agent import AgentService
        from clawdesk.eval.memory import MemoryRun
        from clawdesk.loop.trainers import InProcessTrainer
        from clawdesk.runtime import build_learning_loop, load_engine, open_store
        from clawdesk.store.versions import list_versions

        opts, scenario = self.options, self.scenario
        started = time.monotonic()
        cfg = self.run_config()
        store = open_store(cfg)
        engine = load_engine(cfg, store, self.model_spec)
        loop = None
        try:
            service = AgentService(engine, cfg.chat, memory=cfg.memory)
            # torch on the run's cores (every core unless model.n_threads fixes them): chat, judge and
            # trainer take turns
            trainer = InProcessTrainer(seed=opts.seed, threads=cfg.model.n_threads)
            judge, classify = self._judge(cfg, store, engine, service.gate)
            # [memory hook] the app's memory in the chats and the held-out prompts; the loop's judge pass
            # notes the standing hints as items (classify None: the memory is off)
            memory = self._memory = MemoryRun.start(cfg.memory, engine, classify)
            loop = build_learning_loop(
                cfg, store, engine, gate=service.gate, judge=judge, classify=classify, trainer=trainer,
                synchronous=True,
            )  # fmt: skip
            round_ = _Round(self.on_event)
            loop.subscribe(round_)
            loop.start()
            scorer = Scorer(engine, scenario.phases[0], cfg.chat.system_prompt, opts.max_reply_tokens)
            scorer.memory = memory.served_block(store)  # [memory hook]
            ppl_curve: list[list[float]] = [[0, 1.0]]
            phases, with_hint = [], {}  # with-hint scores on the base, by persona set (same weights: scored once)
            train_s, i, replies, served_any = 0.0, 0, [], False
            for j, phase in enumerate(scenario.phases):
                start, scorer.persona = i, phase
                names = tuple(phase.names)
                if names not in with_hint:
                    with_hint[names] = scorer.score(hint=True)
                self._emit("score", i, scenario.total, f"phase {j + 1}: scoring {' + '.join(names)}")
                base = scorer.score()
                replies = scorer.last_replies
                scores: list[list[float]] = [[i, base]]
                for k in range(phase.interactions):
                    self._interact(service, store, phase, j, i, k)
                    loop.turn_recorded()
                    i += 1
                    self._emit("interact", i, scenario.total, phase.prompt(k))
                    if i % opts.train_every and k + 1 < phase.interactions:
                        if opts.judges_at_once(memory.on):  # [memory hook] as the app does: an item acts at once
                            round_.begin(loop.state.judge_ready, loop.state.serving)
                            loop.judge_pending()
                            if memory.changed(store, i):
                                scores.append([i, scorer.score()])
                        continue  # a round every train_every interactions, and at the end of every phase
                    round_.begin(loop.state.judge_ready, loop.state.serving)
                    loop.judge_pending()
                    remembered = memory.changed(store, i)  # [memory hook]
                    if opts.method == "off":
                        if remembered:  # [memory hook]
                            scores.append([i, scorer.score()])
                        continue
                    t0 = time.monotonic()
                    loop.train_ready()
                    train_s += time.monotonic() - t0
                    if round_.failed:
                        raise TrainError(round_.failed)
                    remembered = memory.changed(store, i) or remembered  # [memory hook] items it carries left
                    if round_.served is None and not remembered:
                        # No new version served (too few samples, or every one rejected): the same weights,
                        # and greedy replies on a fresh cache repeat exactly, so the point is the last one again.
                        scores.append([i, scores[-1][1]])
                        ppl_curve.append([i, ppl_curve[-1][1]])
                        continue
                    what = f"adapter v{round_.served}" if round_.served is not None else "the changed memory"
                    self._emit("score", i, scenario.total, f"scoring {what}")
                    scores.append([i, scorer.score()])
                    replies = scorer.last_replies
                    if round_.served is None:  # [memory hook] the same weights: the ratio is the last one
                        ppl_curve.append([i, ppl_curve[-1][1]])
                    else:
                        served_any = True
                        ppl_curve.append([i, self._ppl_ratio(trainer.learner, engine, cfg)["ppl_ratio"]])
                phases.append(self._phase_result(j, phase, start, scores, with_hint[names]))
            learner = trainer.learner
            # Nothing ever served: the chat ran on the base throughout (a rejected version's weights are
            # put back), so the ratio is 1 by definition; measuring it would cost two passes over the set.
            ppl = self._ppl_ratio(learner, engine, cfg) if learner is not None and served_any else {"ppl_ratio": 1.0}
            versions = list_versions(store)
            final = [point for ph in phases for point in ph["scores"]][-1][1]
            satisfied = [t.satisfied for t in self._turns]
            memory_result = memory.result(store, scorer, satisfied, final)  # [memory hook]
        finally:
            if loop is not None:
                loop.close()  # it closes the judge's own engine (judge.model), never the served one
            engine.close()
            store.close()
        scores = [point for ph in phases for point in ph["scores"]]
        values = [s for _, s in scores]
        result = {
            "persona": scenario.name,
            "scenario": scenario.name if scenario.path is not None else None,
            "method": opts.method,
            "judge": opts.effective_judge,
            "model": engine.identity.name,
            "interactions": scenario.total,
            "train_every": opts.train_every,
            "batch_size": opts.batch_size,
            "seed": opts.seed,
            "base_score": phases[0]["base_score"],
            "final_score": values[-1],
            "best_score": max(values),
            "with_hint_score": phases[0]["with_hint_score"],
            "scores": scores,  # every phase's points in turn: two points at a phase boundary (end, next base)
            "interactions_to_target": interactions_to_target(scores, 0, None),
            "ppl_ratio": ppl["ppl_ratio"],
            "neutral_nll": ppl,
            "ppl_curve": ppl_curve,  # [interactions, ppl_ratio of the adapter served then]
            "max_ppl_ratio": max(r for _, r in ppl_curve),
            "judge_agreement": self._agreement.result() if opts.effective_judge == "self" else None,
            "n_satisfied": sum(t.satisfied for t in self._turns),
            "phases": phases,
            "retention": retention(scenario, replies),  # the last scoring's replies: the weights served at the end
            "kept_versions": [v.version for v in versions if v.ready],
            "rejected_versions": [v.version for v in versions if not v.ready],
            "wall_s": time.monotonic() - started,
            "train_s": train_s,
            "config": {
                "train": dataclasses.asdict(cfg.train),
                "judge": dataclasses.asdict(cfg.judge),
                "chat": {
                    "temperature": cfg.chat.temperature,
                    "max_reply_tokens": opts.max_reply_tokens,
                    "repeat_stop": cfg.chat.repeat_stop,
                },
                "model_path": str(engine.identity.path),
                "scenario_file": str(scenario.path) if scenario.path is not None else None,
            },
        } | memory_result  # [memory hook]
        self._emit("done", scenario.total, scenario.total, f"final score {values[-1]:.2f}")
        return result

    def _phase_result(self, j: int, phase: Phase, start: int, scores, with_hint: float) -> dict[str, Any]:
        base = scores[0][1]
        agreement = self._phase_agreement.get(j, Agreement())
        return {
            "personas": phase.names,
            "start": start,
            "interactions": phase.interactions,
            "base_score": base,
            "with_hint_score": with_hint,
            "scores": scores,
            "final_score": scores[-1][1],
            "interactions_to_target": interactions_to_target(scores, start, base),
            "n_satisfied": sum(t.satisfied for t in self._turns if t.phase == j),
            "judge_agreement": agreement.result() if self.options.effective_judge == "self" else None,
        }

    # -- setup -------------------------------------------------------------------------------

    def run_config(self) -> Config:
        """The user's settings in a fresh data dir, with the method's loss weights and the batch size."""
        opts = self.options
        home = self.out_dir / "home"
        if home.exists():
            shutil.rmtree(home)  # our own scratch dir from an earlier run of this eval
        train = dataclasses.replace(self.config.train, batch_size=opts.batch_size)
        if opts.method == "binary":
            train = dataclasses.replace(train, w_opd=0.0)
        elif opts.method == "opd":
            train = dataclasses.replace(train, w_binary=0.0)
        # Chat, judge and trainer take turns here (nothing runs beside them): every core for each, unless
        # the user fixed model.n_threads (e.g. to run two evals side by side, one core each).
        cores = self.config.model.n_threads or os.cpu_count() or 2
        model = dataclasses.replace(self.config.model, seed=self.config.model.seed + opts.seed, n_threads=cores)
        chat = dataclasses.replace(self.config.chat, max_reply_tokens=opts.max_reply_tokens, thinking=False)
        return dataclasses.replace(self.config, home=home, train=train, model=model, chat=chat)

    def _emit(self, phase: str, done: int, total: int, message: str = "") -> None:
        self.on_event(EvalEvent(phase, done, total, message))

    # -- one interaction ---------------------------------------------------------------------

    def _interact(self, service, store, phase: Phase, j: int, i: int, k: int) -> None:
        """Interaction ``i`` of the run (``k`` of phase ``j``)."""
        session = service.new_session(store)
        request = phase.prompt(k)
        result = service.run_turn(store, session.id, request)
        reaction = phase.react(request, result.reply.content, i)
        # The user's next message is recorded as the next turn but gets no reply: a pre-set cancel
        # makes the app's own turn path record it without generating (the eval needs only the state).
        stopped = threading.Event()
        stopped.set()
        service.run_turn(store, session.id, reaction.message, cancel=stopped)
        self._turns.append(_Turn(result.turn_id, reaction.satisfied, reaction.hint, j))
        self._by_id[result.turn_id] = self._turns[-1]

    # -- the judge the loop calls ------------------------------------------------------------

    def _judge(self, cfg: Config, store, engine, gate):
        """The run's judge: the app's self-judge (agreement counted) or the oracle, wrapped by the method's
        control; and the standing-hint classifier the loop notes preference items with (None: memory off)."""
        from clawdesk.eval.memory import oracle_classifier
        from clawdesk.runtime import hint_classifier, load_judge

        opts = self.options
        if opts.effective_judge == "self":  # the app's one judge constructor: judge.model is honoured
            app_judge = load_judge(cfg, store, engine, gate=gate)
            judge = ObservedJudge(app_judge, self._count_agreement)
            classify = hint_classifier(cfg, app_judge)  # [memory hook] the app's classifier
        else:
            judge = OracleJudge(engine, self._truth)
            if opts.method == "shuffled":
                judge = ShuffledJudge(judge, opts.seed, salt=lambda: len(self._turns))
            classify = oracle_classifier if cfg.memory.enabled else None  # [memory hook]
        if opts.method == "opd":
            judge = ZeroRewardJudge(judge)  # OPD alone: only hinted turns become samples
        return judge, classify

    def _truth(self, turn_id: int) -> tuple[bool, str | None]:
        """What the simulated user said of the reply of ``turn_id``: (satisfied, the oracle's hint)."""
        turn = self._by_id[turn_id]
        return turn.satisfied, turn.hint

    def _count_agreement(self, pending, judgment) -> None:
        turn = self._by_id[pending.turn.id]
        for agreement in (self._agreement, self._phase_agreement.setdefault(turn.phase, Agreement())):
            agreement.count(judgment.reward, judgment.hint is not None, turn.satisfied)

    def _ppl_ratio(self, learner, engine, cfg: Config) -> dict[str, float]:
        """exp(mean NLL with the adapter − without) on the shipped neutral Q&A set: 1.0 = no forgetting."""
        from clawdesk.eval.scoring import neutral_pairs

        if self._neutral is None:
            self._neutral = neutral_pairs(engine, cfg.chat.system_prompt)
        pairs = self._neutral
        self._emit("score", 1, 1, f"general ability on {len(pairs)} neutral replies")
        nll_a = learner.mean_nll(pairs, adapter=True)  # the learner's weights = the newest ready version's
        nll_b = learner.mean_nll(pairs, adapter=False)
        n = sum(len(r) for _, r in pairs)
        return {"ppl_ratio": math.exp(nll_a - nll_b), "nll_adapter": nll_a, "nll_base": nll_b, "n_tokens": float(n)}


def claim_out_dir(out_dir: Path):
    """An exclusive lock on ``<out_dir>/.eval.lock`` (an open file; closing it, or the process ending, lets go),
    or an :class:`InputError`. A run starts from a fresh data dir in ``out_dir`` (:meth:`Experiment.run_config`
    deletes the last one), so a second eval given the same ``--out`` while one runs would delete the running
    one's database and adapters under it (measured: it did, before this lock). Where ``fcntl`` is missing
    (Windows) nothing is locked."""
    try:
        handle = try_lock(out_dir / ".eval.lock")
    except OSError as exc:
        raise InputError(f"cannot write to --out {out_dir} ({exc}); choose a directory you can write") from exc
    if handle is None:
        raise InputError(f"another clawdesk eval is writing to {out_dir}; wait for it to finish, or give another --out")
    return handle
