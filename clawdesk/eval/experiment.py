"""The simulated-user experiment: one scenario (or one persona), one learning method, held-out scores.

A run walks a :class:`~clawdesk.eval.scenarios.Scenario` phase by phase (a ``--persona`` run is a
one-phase scenario). One interaction is a new chat session (one session per task, as in the paper):
the phase's next training prompt → the served reply (sampled, adapter on, exactly as the chat
serves it) → the simulated user's satisfied/unsatisfied message, recorded as the next turn (its own
reply is not generated: it is the next state and nothing more). Each phase is scored at its start
(with the adapter served then) and after every training round on its own held-out set. Every
``train_every`` interactions, and at the end of every phase, the pending turns are judged (``self``:
the app's judge, from ``runtime.load_judge``; ``oracle``: reward from the phase's checks, hint from
the first failing persona), the app's trainer makes as many versions as full batches are ready,
and the newest ready version is hot-swapped in with the app's own
:class:`~clawdesk.reload.AdapterSwitch`.

The base model for training is loaded once per run (a :class:`~clawdesk.learn.learner.Learner`
kept across steps). Everything lives in a fresh data dir under the output dir, never the user's.

Why this does not drive :class:`clawdesk.loop.LearningLoop` (the chat's loop): its numbers must be
reproducible and comparable across methods, and the loop would change them. The eval judges
synchronously at fixed points (every ``train_every`` interactions), replaces the judge's output before
it is saved (oracle, shuffled, OPD-only), and trains in this process with one seeded ``Learner`` kept
across steps (its AdamW moments and LoRA init carry over) on every core. The loop judges in the
background as turns arrive (which turns a step sees depends on timing), saves judgments as they are,
and trains one step per ``python -m clawdesk.learn.trainer`` launch, which reloads the base, restarts the
optimizer from the saved adapter, is unseeded and niced to half the cores. What the two share are the
steps themselves: ``runtime.load_judge``, ``Judge.judge``, ``learn.trainer.train`` and ``AdapterSwitch``.

Methods: ``combined`` (the app), ``binary`` (w_opd = 0), ``opd`` (w_binary = 0, hinted samples
only), ``off`` (no training), ``shuffled`` (combined on the oracle's rewards and hints permuted
across the turns of each training round: a control for drift from training at all).
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawdesk.config import Config
from clawdesk.errors import InputError
from clawdesk.eval.scenarios import TARGET, Phase, Scenario, interactions_to_target, retention
from clawdesk.eval.scoring import Scorer

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


def shuffle_signals(signals: list, seed: int, salt: int) -> list:
    """The ``shuffled`` control: the round's (reward, hint) pairs in a seeded random order (same multiset)."""
    out = list(signals)
    random.Random(seed * 7919 + salt).shuffle(out)
    return out


@dataclass(frozen=True)
class EvalEvent:
    """Progress of a run: ``phase`` is 'interact', 'judge', 'train', 'score' or 'done'."""

    phase: str
    done: int
    total: int
    message: str = ""


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
    _agreement: Agreement = field(default_factory=Agreement)
    _phase_agreement: dict[int, Agreement] = field(default_factory=dict)
    _neutral: list | None = None  # the neutral set's (prompt, reply) ids, tokenized once
    _memory: Any = None  # [memory hook] the run's clawdesk.eval.memory.MemoryRun

    def run(self) -> dict[str, Any]:
        from clawdesk.agent import AgentService
        from clawdesk.eval.memory import MemoryRun, oracle_classifier
        from clawdesk.reload import AdapterSwitch
        from clawdesk.runtime import hint_classifier, load_engine, load_judge, open_store
        from clawdesk.store.versions import list_versions

        opts, scenario = self.options, self.scenario
        started = time.monotonic()
        cfg = self.run_config()
        store = open_store(cfg)
        engine = load_engine(cfg, store, self.model_spec)
        judge = None
        try:
            if opts.effective_judge == "self":  # the app's one judge constructor: judge.model is honoured
                judge = load_judge(cfg, store, engine)
            # [memory hook] the app's memory in the chats and the held-out prompts; items from the judge's hints
            classify = hint_classifier(cfg, judge) if judge is not None else oracle_classifier
            memory = self._memory = MemoryRun.start(cfg.memory, engine, cfg.chat.system_prompt, classify)
            service = AgentService(engine, cfg.chat, memory=cfg.memory)
            scorer = Scorer(engine, scenario.phases[0], cfg.chat.system_prompt, opts.max_reply_tokens)
            scorer.memory = memory.served_system(store)  # [memory hook]
            switch = AdapterSwitch(engine, store)
            ppl_curve: list[list[float]] = [[0, 1.0]]
            phases, with_hint = [], {}  # with-hint scores on the base, by persona set (same weights: scored once)
            learner, train_s, i, replies = None, 0.0, 0, []
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
                    i += 1
                    self._emit("interact", i, scenario.total, phase.prompt(k))
                    if i % opts.train_every and k + 1 < phase.interactions:
                        if memory.on:  # [memory hook] judged at once, as the app does: an item acts from the next reply
                            self._judge_pending(store, engine, judge)
                            if memory.changed(store, i):
                                scores.append([i, scorer.score()])
                        continue  # a round every train_every interactions, and at the end of every phase
                    self._judge_pending(store, engine, judge)
                    remembered = memory.changed(store, i)  # [memory hook]
                    if opts.method == "off":
                        if remembered:  # [memory hook]
                            scores.append([i, scorer.score()])
                        continue
                    t0 = time.monotonic()
                    learner, made = self._train(cfg, engine, learner)
                    train_s += time.monotonic() - t0
                    served = engine.adapter_version
                    if made:
                        switch.sync()
                    memory.changed(store, i)  # [memory hook] items the new version carries left the prompt
                    if engine.adapter_version == served and not remembered:  # [memory hook] "and not remembered"
                        # No new version served (too few samples, or every one rejected): the same weights,
                        # and greedy replies on a fresh cache repeat exactly, so the point is the last one again.
                        scores.append([i, scores[-1][1]])
                        ppl_curve.append([i, ppl_curve[-1][1]])
                        continue
                    self._emit("score", i, scenario.total, f"scoring adapter v{engine.adapter_version}")
                    scores.append([i, scorer.score()])
                    replies = scorer.last_replies
                    ppl_curve.append([i, self._ppl_ratio(learner, engine, cfg)["ppl_ratio"]])
                phases.append(self._phase_result(j, phase, start, scores, with_hint[names]))
            ppl = self._ppl_ratio(learner, engine, cfg) if learner is not None else {"ppl_ratio": 1.0}
            versions = list_versions(store)
            final = [point for ph in phases for point in ph["scores"]][-1][1]
            satisfied = [t.satisfied for t in self._turns]
            memory_result = memory.result(store, scorer, satisfied, final)  # [memory hook]
        finally:
            if judge is not None and judge.engine is not engine:
                judge.engine.close()
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
                "chat": {"temperature": cfg.chat.temperature, "max_reply_tokens": opts.max_reply_tokens},
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
        cores = os.cpu_count() or 2
        # Chat, judge and trainer take turns here (nothing runs beside them): every core for each.
        model = dataclasses.replace(self.config.model, seed=self.config.model.seed + opts.seed, n_threads=cores)
        chat = dataclasses.replace(self.config.chat, max_reply_tokens=opts.max_reply_tokens, thinking=False)
        return dataclasses.replace(self.config, home=home, train=train, model=model, chat=chat)

    def _emit(self, phase: str, done: int, total: int, message: str = "") -> None:
        self.on_event(EvalEvent(phase, done, total, message))

    # -- one interaction ---------------------------------------------------------------------

    def _interact(self, service, store, phase: Phase, j: int, i: int, k: int) -> None:
        """Interaction ``i`` of the run (``k`` of phase ``j``)."""
        session = service.new_session(store)
        result = service.run_turn(store, session.id, phase.prompt(k))
        reaction = phase.react(result.reply.content, i)
        # The user's next message is recorded as the next turn but gets no reply: a pre-set cancel
        # makes the app's own turn path record it without generating (the eval needs only the state).
        stopped = threading.Event()
        stopped.set()
        service.run_turn(store, session.id, reaction.message, cancel=stopped)
        self._turns.append(_Turn(result.turn_id, reaction.satisfied, reaction.hint, j))

    # -- judging -----------------------------------------------------------------------------

    def _judge_pending(self, store, engine, judge) -> None:
        """Judge what is pending with ``judge`` (the app's self-judge), or with the oracle when it is None."""
        from clawdesk.store.judgments import pending_turns, save_judgment

        pending = pending_turns(store)
        by_id = {t.turn_id: t for t in self._turns}
        judgments = []
        for k, p in enumerate(pending):
            self._emit("judge", k + 1, len(pending), f"judging turn {p.turn.id}")
            turn = by_id[p.turn.id]
            j = judge.judge(store, p) if judge is not None else self._oracle(store, engine, p, turn)
            if judge is not None:
                for agreement in (self._agreement, self._phase_agreement.setdefault(turn.phase, Agreement())):
                    agreement.count(j.reward, j.hint is not None, turn.satisfied)
            judgments.append(j)
        if self.options.method == "shuffled":
            judgments = self._shuffle(store, engine, pending, judgments)
        for p, j in zip(pending, judgments, strict=True):
            if self.options.method == "opd":
                j = dataclasses.replace(j, reward=0)  # OPD alone: only hinted turns become samples
            save_judgment(store, j)
            if self._memory is not None:  # [memory hook] the app notes a standing hint as a preference item
                self._memory.note(store, j, p.turn.user_content, p.next_state)

    def _oracle(self, store, engine, pending, turn: _Turn | None, hint_from=None):
        from clawdesk.judge.parse import enhanced_user_message
        from clawdesk.judge.teacher import teacher_prompt, turn_context
        from clawdesk.store.judgments import Judgment

        if hint_from is None:
            reward, hint = (1, None) if turn.satisfied else (-1, turn.hint)
        else:
            reward, hint = hint_from
        enhanced = enhanced_user_message(pending.turn.user_content, hint) if hint else None
        ids, note = teacher_prompt(engine, turn_context(store, pending.turn), enhanced) if enhanced else (None, "")
        ident = engine.identity
        return Judgment(
            turn_id=pending.turn.id, next_turn_id=pending.next_turn_id, prompt_version="oracle",
            judge_model_name="oracle", judge_model_sha256=ident.sha256, score_outputs=[], votes=[reward],
            reward=reward, hint_outputs=[], hint=hint, enhanced_user=enhanced, enhanced_prompt_ids=ids,
            seconds=0.0, note=note,
        )  # fmt: skip

    def _shuffle(self, store, engine, pending, judgments):
        signals = shuffle_signals([(j.reward, j.hint) for j in judgments], self.options.seed, len(self._turns))
        return [self._oracle(store, engine, p, None, hint_from=s) for p, s in zip(pending, signals, strict=True)]

    # -- training ----------------------------------------------------------------------------

    def _train(self, cfg: Config, engine, learner):
        import torch

        from clawdesk.learn.trainer import load_learner, train

        torch.set_num_threads(os.cpu_count() or 2)
        if learner is None:
            torch.manual_seed(self.options.seed)  # the fresh LoRA's initial A matrices
            self._emit("train", 0, 1, "loading the base model for training (once per run)")
            learner = load_learner(engine.identity.path, cfg.train, None)
        ident = engine.identity

        def progress(p) -> None:
            self._emit("train", p.step, max(p.steps, 1), p.message)

        made = train(
            cfg.db_path, cfg.adapters_dir, ident.path, ident.name, ident.sha256, cfg.train,
            on_progress=progress, learner=learner, system_prompt=cfg.chat.system_prompt,
        )  # fmt: skip
        return learner, made

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
