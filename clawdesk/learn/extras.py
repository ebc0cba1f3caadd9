"""What a step learns besides its batch of judged turns: the levers' sampled replies (docs/learning.md, "Levers").

- context distillation (``train.distill_samples``): replies the teacher writes with the hint, learned
  in the prompt without it (:func:`distill_samples`);
- on-policy distillation on the adapter's own replies (``train.student_samples``): what the person
  would get once the items left the prompt, scored by the teacher that has them (:func:`student_samples`);
- the anchor (``train.anchor_coef``): the base's own replies to general prompts, for the KL to the
  base (:func:`anchor_replies`).

Each is an :class:`Extra`; :func:`lever_samples` makes the ones the config turns on for one step.
:class:`~clawdesk.learn.learner.Learner` samples and scores; :meth:`Learner.step` learns them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from clawdesk.config import TrainConfig
from clawdesk.learn.samples import Sample


@dataclass(frozen=True)
class Extra:
    """A reply the step learns besides the batch's: a sampled teacher reply, or an anchor reply of the base.

    ``prompt_ids`` is the context the policy learns it in (without the hint), ``reply_ids`` the sampled
    tokens, ``target_logp`` their log-probs under the teacher (distillation) or the base (anchor), ``(T,)``;
    with ``target_ids`` (``train.student_topk``) the teacher's K likeliest tokens at each position,
    ``(T, K)``, and ``target_logp`` their log-probs, ``(T, K)``.
    """

    prompt_ids: list[int]
    reply_ids: list[int]
    target_logp: Any
    target_ids: Any = None

    @property
    def n_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.reply_ids)


class Learner(Protocol):
    """What these functions use of :class:`clawdesk.learn.learner.Learner` (which imports :class:`Extra`)."""

    config: TrainConfig
    anchor_cache: tuple[tuple, list[Extra]] | None

    @property
    def policy_teacher(self) -> bool: ...
    def sample(self, prompts, *, max_tokens: int, temperature: float, seed: int, adapter: bool = False): ...
    def logprobs_each(self, pairs, *, adapter: bool = True) -> list[Any]: ...
    def topk_each(self, pairs, k: int, *, adapter: bool = True) -> list[Any]: ...
    def remembered(self, pairs, *, adapter: bool) -> list[Any]: ...


def lever_samples(
    learner: Learner, batch: Sequence[Sample], *, anchor_prompts: Sequence[Sequence[int]] = (),
    progress: Callable[[str], None] = lambda message: None,
) -> dict[str, list[Extra]]:  # fmt: skip
    """The step's distillation, student and anchor samples (empty lists for the levers that are off)."""
    cfg, out = learner.config, {"distill": [], "anchor": [], "student": []}
    hinted = sum(s.has_hint for s in batch)
    if cfg.distill_samples and cfg.w_distill > 0 and hinted:
        progress(f"sampling {cfg.distill_samples}x{hinted} teacher replies to distil")
        out["distill"] = distill_samples(learner, batch, seed=batch[0].turn_id)  # a new batch, new draws
    if cfg.student_samples and cfg.w_student > 0 and hinted:
        top = f", its top {cfg.student_topk} tokens at each position" if cfg.student_topk else ""
        progress(f"sampling {cfg.student_samples}x{hinted} of the adapter's own replies for its teacher{top}")
        out["student"] = student_samples(learner, batch, seed=batch[0].turn_id + 1)
    if anchor_prompts:
        out["anchor"] = anchor_replies(learner, anchor_prompts, seed=0)  # sampled once per learner
    return out


def distill_samples(learner: Learner, samples: Sequence[Sample], *, seed: int) -> list[Extra]:
    """Context distillation: ``train.distill_samples`` replies per hinted sample from the teacher.

    The teacher is the base (or the adapter, ``train.teacher``) with the hint in context (the sample's
    teacher prompt); each reply is learned in the sample's own prompt, without the hint, with the
    teacher's log-probs of it.
    """
    cfg = learner.config
    hinted = [s for s in samples if s.has_hint for _ in range(cfg.distill_samples)]
    return _teacher_scored(
        learner, hinted, [s.teacher_prompt_ids for s in hinted], temperature=cfg.distill_temperature, seed=seed,
        adapter=learner.policy_teacher, fits=lambda s, r: len(s.prompt_ids) + len(r) <= cfg.token_budget,
    )  # fmt: skip


def student_samples(learner: Learner, samples: Sequence[Sample], *, seed: int) -> list[Extra]:
    """On-policy distillation: ``train.student_samples`` replies per teacher-bearing sample from the adapter.

    Each reply is sampled (temperature 1) from the adapter in the sample's own prompt, without the
    preference items and the hint, so it is what the person would get once the items left the
    prompt; its target is the teacher's log-probs of it (the base, or the adapter before the step with
    ``train.teacher = "policy"``, with the items and the hint).
    The step learns it with the OPD advantage ``teacher − old`` (``part == "student"``), or with
    ``train.student_topk`` = K > 0 the teacher's K likeliest tokens at each position (the top-K KL).
    """
    cfg = learner.config
    taught = [s for s in samples if s.has_hint for _ in range(cfg.student_samples)]
    return _teacher_scored(
        learner, taught, [s.prompt_ids for s in taught], temperature=1.0, seed=seed, adapter=True,
        fits=lambda s, r: len(s.teacher_prompt_ids) + len(r) <= cfg.token_budget, topk=cfg.student_topk,
    )  # fmt: skip


def _teacher_scored(
    learner: Learner, samples: Sequence[Sample], prompts, *, temperature, seed, adapter, fits, topk: int = 0
) -> list[Extra]:
    """One reply per sample, sampled for ``prompts[i]``, kept if non-empty and ``fits``, scored by its teacher.

    Each becomes an :class:`Extra` learned in the sample's student prompt, its target the teacher's
    (the base's, or the adapter's: ``train.teacher``) log-probs of the reply given the sample's
    teacher prompt (``topk`` > 0: its ``topk`` likeliest tokens at each position of the reply, and
    their log-probs).
    """
    if not samples:
        return []
    replies = learner.sample(
        prompts, max_tokens=learner.config.distill_max_tokens, temperature=temperature, seed=seed, adapter=adapter
    )
    kept = [(s, r) for s, r in zip(samples, replies, strict=True) if r and fits(s, r)]
    pairs = [(s.teacher_prompt_ids, r) for s, r in kept]
    if topk:
        top = learner.topk_each(pairs, topk, adapter=learner.policy_teacher)
        return [Extra(list(s.prompt_ids), r, lp, ids) for (s, r), (lp, ids) in zip(kept, top, strict=True)]
    teacher = learner.logprobs_each(pairs, adapter=learner.policy_teacher)
    return [Extra(list(s.prompt_ids), r, t) for (s, r), t in zip(kept, teacher, strict=True)]


def anchor_replies(learner: Learner, prompts: Sequence[Sequence[int]], *, seed: int) -> list[Extra]:
    """The base's own replies to ``prompts`` (temperature 1: a sample of its distribution), with its log-probs.

    Sampled once per learner for the same prompts (kept in ``learner.anchor_cache``): the base never
    changes, so neither do its replies.
    """
    key = (tuple(tuple(p) for p in prompts), learner.config.anchor_max_tokens, seed)
    cached = learner.anchor_cache
    if cached is None or cached[0] != key:
        replies = learner.sample(prompts, max_tokens=learner.config.anchor_max_tokens, temperature=1.0, seed=seed)
        pairs = [(list(p), r) for p, r in zip(prompts, replies, strict=True) if r]
        ref = learner.remembered(pairs, adapter=False)
        cached = learner.anchor_cache = (key, [Extra(p, r, lp) for (p, r), lp in zip(pairs, ref, strict=True)])
    return cached[1]
