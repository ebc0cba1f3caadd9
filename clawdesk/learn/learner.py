"""The learner: the LoRA model + optimizer of one training run, and what it samples and scores.

:class:`Learner` owns the PEFT model and its AdamW state. One :meth:`Learner.step` is
``train.epochs`` optimizer passes over one batch of judged turns (PPO-style): the "old" log-probs
are the policy's own log-probs from the first pass's forward, detached and kept, so later passes
see ratios ≠ 1 and the clip in :func:`clawdesk.learn.objective.combined_loss` bounds how far one
batch can move the policy. With one pass the ratio is exactly 1 (the default is two).

:mod:`clawdesk.learn.trainer` drives it (scoring, writing and validating versions); the eval keeps
one :class:`Learner` loaded for a whole run. The levers of docs/learning.md enter here: a step
may also learn the replies :mod:`clawdesk.learn.extras` samples through it (context
distillation, the adapter's own replies for its teacher, anchor replies), and with
``train.keep_optimizer`` the AdamW moments survive a restore and come from the parent version
(:mod:`clawdesk.learn.optim_state`).
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from clawdesk.config import TrainConfig
from clawdesk.errors import TrainError
from clawdesk.learn.extras import Extra
from clawdesk.learn.logprobs import aligned, micro_batches, reply_logprobs, reply_topk
from clawdesk.learn.samples import Sample
from clawdesk.learn.step_metrics import StepMetrics

MAX_GRAD_NORM = 1.0


CHECKPOINT_MIN_PARAMS = 1_000_000_000  # bases this big train with gradient checkpointing


_BASE = object()  # the ``_memo`` tag of log-probs with the adapter disabled (the base never changes)


class Stopped(Exception):
    """The stop event was set; the step in progress is abandoned, nothing is written."""


class _Snapshot(list):
    """LoRA weights saved by :meth:`Learner.snapshot`, tagged with the identity of those weights.

    The tag lets :meth:`Learner.restore` bring back the held-out log-probs already computed for them;
    ``optimizer`` is AdamW's state then (``train.keep_optimizer``), else None.
    """

    def __init__(self, tensors: list[Any], weights: object, optimizer: dict | None = None):
        super().__init__(tensors)
        self.weights = weights
        self.optimizer = optimizer


# -- the learner ---------------------------------------------------------------------------------


class Learner:
    """The PEFT model and optimizer of one training run."""

    def __init__(
        self, model, info, config: TrainConfig, *, parent_dir: Path | None, gradient_checkpointing: bool | None = None
    ):
        import torch

        from clawdesk.learn.offline import import_offline

        import_offline()
        from peft import LoraConfig, get_peft_model

        from clawdesk.gguf.lora import TARGET_MODULES  # the modules the GGUF writer can map

        self.info, self.config, self.device = info, config, info.device
        if parent_dir is not None:
            from clawdesk.learn.peft_adapter import load_peft_adapter, load_state_into

            # Not PeftModel.from_pretrained: it would unpickle an adapter_model.bin when the safetensors
            # file is missing. The parent's files are checked and read as safetensors only.
            fix = (
                f"Training continues from the newest ready version ({parent_dir.name}), so it cannot go on until "
                "that file is restored; the chat can still serve another version (`clawdesk adapters rollback`)."
            )
            lora, state = load_peft_adapter(parent_dir, fix=fix)
            self.model = get_peft_model(model, lora)
            load_state_into(self.model, state, parent_dir / "adapter_model.safetensors", fix=fix)
        else:
            lora = LoraConfig(
                r=config.lora_r,
                lora_alpha=config.lora_alpha,
                lora_dropout=0.0,
                target_modules=list(TARGET_MODULES),
                bias="none",
                task_type="CAUSAL_LM",
            )
            self.model = get_peft_model(model, lora)
        if gradient_checkpointing is None:
            # Recomputing activations only pays where they would not fit: a 4B model's activations at
            # train.token_budget run to many GB; a small base's fit. Its cost on the demo model varied
            # between suite runs (1.15x and 3.96x the step time, bench/sec_train.py, docs/benchmarks.md).
            gradient_checkpointing = info.n_params >= CHECKPOINT_MIN_PARAMS
        self.gradient_checkpointing = gradient_checkpointing
        if gradient_checkpointing:
            self.model.enable_input_require_grads()
            base = self.model.get_base_model()
            # transformers 5.x renamed it (the old name warns); both take the torch.utils.checkpoint kwargs.
            if hasattr(base, "activation_checkpointing_enable"):
                base.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        self.param_names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self._torch = torch
        self.optimizer = self._new_optimizer()
        # Where the moments came from, for the trainer's progress line (train.keep_optimizer).
        self.optimizer_source = "fresh"
        if parent_dir is not None and config.keep_optimizer:
            self._load_optimizer(parent_dir)
        self.anchor_cache: tuple[tuple, list[Extra]] | None = None  # extras.anchor_replies: (its key, its replies)
        # Log-probs per (prompt, reply) under the LoRA weights ``_weights`` identifies (and, tagged _BASE,
        # with the adapter disabled: the guard's base side, scored once per learner). A step's
        # "after" is the next step's "before" (and, when a version is rejected and restored, the
        # "before" is still valid), so validation never scores the same replies twice under the same
        # weights. The weights change only in step() and restore(), which replace the identity.
        self._weights: object = object()
        self._memo: dict[object, dict[tuple[tuple[int, ...], tuple[int, ...]], Any]] = {}

    def _new_optimizer(self):
        # No weight decay: it would pull the LoRA towards zero between feedback batches, i.e. slowly forget.
        return self._torch.optim.AdamW(self.params, lr=self.config.lr, weight_decay=0.0)

    def _load_optimizer(self, parent_dir: Path) -> None:
        """The parent version's AdamW moments, when it kept them; a file that does not fit leaves them fresh."""
        from clawdesk.learn import optim_state

        path = Path(parent_dir) / optim_state.OPTIMIZER_FILE
        try:
            tensors = optim_state.load(path)
            if tensors is None:
                self.optimizer_source = f"fresh: {parent_dir.name} kept no optimizer state"
                return
            optim_state.load_tensors(self.optimizer, self.param_names, tensors)
        except TrainError as err:  # the moments only speed learning up: a bad file must not stop it
            self.optimizer = self._new_optimizer()
            self.optimizer_source = f"fresh: {err}"
            return
        self.optimizer_source = f"kept from {parent_dir.name}"

    def optimizer_tensors(self) -> dict[str, Any]:
        """AdamW's moments by parameter name, for :func:`clawdesk.learn.optim_state.save`."""
        from clawdesk.learn.optim_state import state_tensors

        return state_tensors(self.optimizer, self.param_names)

    def set_lr(self, lr: float) -> None:
        """The learning rate of the next optimizer steps (the trainer's guard retries a step at a smaller one)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def snapshot(self) -> list[Any]:
        optim = copy.deepcopy(self.optimizer.state_dict()) if self.config.keep_optimizer else None
        return _Snapshot([p.detach().clone() for p in self.params], self._weights, optim)

    def restore(self, snapshot: list[Any]) -> None:
        """Put back the LoRA weights of ``snapshot``, and the optimizer as it was then (``train.keep_optimizer``)
        or a fresh one (the default: its moments saw the step being undone)."""
        with self._torch.no_grad():
            for p, saved in zip(self.params, snapshot, strict=True):
                p.copy_(saved)
        self.optimizer = self._new_optimizer()
        saved_optim = getattr(snapshot, "optimizer", None)
        if saved_optim is not None:
            self.optimizer.load_state_dict(copy.deepcopy(saved_optim))
        # Exactly the snapshot's weights again: its memoized log-probs hold (another learner's tag has none here).
        self._weights = getattr(snapshot, "weights", None) or object()

    def logprobs_each(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, adapter: bool = True):
        """No-grad reply log-probs, one CPU tensor ``(len(reply),)`` per pair, batched by the token budget."""

        def rows(group_pairs):
            logp, mask = reply_logprobs(self.model, group_pairs, self.device)  # (b, T)
            return [logp[b][mask[b]].cpu() for b in range(len(group_pairs))]

        return self._no_grad_each(pairs, adapter, rows)

    @property
    def policy_teacher(self) -> bool:
        """Whether the teacher is the adapter as it is now (``train.teacher = "policy"``), not the base."""
        return self.config.teacher == "policy"

    def topk_each(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], k: int, *, adapter: bool = True):
        """No-grad ``(logp, ids)`` of the ``k`` likeliest tokens at each reply position, ``(len(reply), k)`` CPU
        tensors per pair (:func:`~clawdesk.learn.logprobs.reply_topk`), batched by the token budget."""
        return self._no_grad_each(pairs, adapter, lambda group: reply_topk(self.model, group, self.device, k))

    def _no_grad_each(self, pairs, adapter: bool, rows: Callable[[list], list]) -> list[Any]:
        """``rows(pairs of one micro-batch)`` (one result per pair) over ``pairs`` batched by the token budget,
        without gradient, with the adapter on or off; the results in the order of ``pairs``."""
        out: list[Any] = [None] * len(pairs)
        self.model.eval()
        ctx = contextlib.nullcontext() if adapter else self.model.disable_adapter()
        with self._torch.no_grad(), ctx:
            for group in micro_batches([len(p) + len(r) for p, r in pairs], self.config.token_budget):
                for i, result in zip(group, rows([pairs[i] for i in group]), strict=True):
                    out[i] = result
        return out

    def score(self, samples: Sequence[Sample]) -> tuple[list[Any], list[Any]]:
        """(ref, teacher) log-probs per sample: ref with the adapter disabled, teacher in the teacher prompt
        under the base or the current adapter (``train.teacher``); teacher is None without a hint."""
        ref = self.logprobs_each([(s.prompt_ids, s.reply_ids) for s in samples], adapter=False)
        hinted = [i for i, s in enumerate(samples) if s.has_hint]
        teach = self.logprobs_each(
            [(samples[i].teacher_prompt_ids, samples[i].reply_ids) for i in hinted], adapter=self.policy_teacher
        )
        teacher: list[Any] = [None] * len(samples)
        for i, lp in zip(hinted, teach, strict=True):
            teacher[i] = lp
        return ref, teacher

    def sample(
        self, prompts: Sequence[Sequence[int]], *, max_tokens: int, temperature: float, seed: int, adapter: bool = False
    ):
        """Replies sampled for ``prompts`` from the base (``adapter`` False) or the adapter, batched by token budget."""
        from clawdesk.learn.sampling import sample_replies

        eos_ids = self._eos_ids()
        out: list[list[int]] = [[] for _ in prompts]
        self.model.eval()
        with contextlib.nullcontext() if adapter else self.model.disable_adapter():
            for k, group in enumerate(micro_batches([len(p) + max_tokens for p in prompts], self.config.token_budget)):
                replies = sample_replies(
                    self.model, [prompts[i] for i in group], self.device, max_tokens=max_tokens,
                    temperature=temperature, eos_ids=eos_ids, seed=seed + k,
                )  # fmt: skip
                for i, reply in zip(group, replies, strict=True):
                    out[i] = reply
        return out

    def mean_logprob(self, samples: Sequence[Sample]) -> dict[str, Any]:
        """Token-weighted mean reply log-prob under the current adapter, and whether every value is finite.

        Replies already scored under the current weights are not scored again (see ``_memo``).
        """
        each = self.remembered([(s.prompt_ids, s.reply_ids) for s in samples], adapter=True)
        n = sum(int(x.numel()) for x in each)
        total = sum(float(x.double().sum()) for x in each)
        finite = all(bool(self._torch.isfinite(x).all()) for x in each)
        return {"mean": total / n if n else 0.0, "n_tokens": n, "finite": finite}

    def mean_nll(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, adapter: bool) -> float:
        """Mean negative log-prob per reply token of ``pairs``, with the current adapter or without it.

        Remembered like :meth:`mean_logprob`; the base's values (``adapter=False``) for the learner's
        whole life, since the base never changes.
        """
        each = self.remembered(pairs, adapter=adapter)
        n = sum(int(x.numel()) for x in each)
        return -sum(float(x.double().sum()) for x in each) / n if n else 0.0

    def remembered(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, adapter: bool) -> list[Any]:
        """:meth:`logprobs_each` of ``pairs`` through ``_memo``: only pairs not yet scored under these weights run."""
        tag = self._weights if adapter else _BASE
        memo = self._memo.setdefault(tag, {})
        stale = [w for w in self._memo if w is not self._weights and w is not _BASE][:-1]
        for w in stale:  # keep the base's, the current weights' and the one before
            del self._memo[w]
        keys = [(tuple(p), tuple(r)) for p, r in pairs]
        missing = list(dict.fromkeys(k for k in keys if k not in memo))
        if missing:
            memo.update(zip(missing, self.logprobs_each(missing, adapter=adapter), strict=True))
        return [memo[k] for k in keys]

    def step(
        self, samples: Sequence[Sample], ref, teacher, *, stop: Callable[[], bool], on_micro=None,
        distill: Sequence[Extra] = (), anchor: Sequence[Extra] = (), student: Sequence[Extra] = (),
    ):  # fmt: skip
        """``train.epochs`` optimizer passes over ``samples``; returns the last pass's metrics.

        Each pass accumulates the gradient of every micro-batch, each weighted by its share of
        samples (so a pass follows the mean over the batch), clips it and makes one AdamW step.
        The old log-probs are taken, detached, from the first pass's own forward (the policy
        before this update is exactly the one computing them) and kept for the later passes.
        ``distill`` (:func:`~clawdesk.learn.extras.distill_samples`) adds ``train.w_distill`` × the mean
        distillation loss, ``anchor`` (:func:`~clawdesk.learn.extras.anchor_replies`) ``train.anchor_coef`` ×
        the mean anchor KL and ``student`` (:func:`~clawdesk.learn.extras.student_samples`)
        ``train.w_student`` × the mean OPD loss on the adapter's own replies, all to the same gradient.
        With ``train.advantage = "baseline"`` the binary term's reward is centred on the batch's mean
        (:func:`clawdesk.learn.objective.centered_reward`), with ``"own_baseline"`` only over the samples
        served without preference items.
        """
        from clawdesk.learn.objective import centered_reward

        torch, cfg = self._torch, self.config
        self._weights = object()  # the LoRA is about to change: memoized log-probs no longer apply
        self.model.train()  # transformers only checkpoints activations in training mode
        rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32)  # (N,)
        if cfg.advantage == "baseline":
            rewards = centered_reward(rewards)
        elif cfg.advantage == "own_baseline":  # only where the reply is the student's own sample
            rewards = centered_reward(rewards, torch.tensor([not s.memory for s in samples], dtype=torch.bool))
        distill = distill if cfg.w_distill > 0 else ()
        anchor = anchor if cfg.anchor_coef > 0 else ()
        student = student if cfg.w_student > 0 else ()
        parts = [
            ("main", list(samples), micro_batches([s.n_tokens for s in samples], cfg.token_budget)),
            ("distill", list(distill), micro_batches([x.n_tokens for x in distill], cfg.token_budget)),
            ("anchor", list(anchor), micro_batches([x.n_tokens for x in anchor], cfg.token_budget)),
            ("student", list(student), micro_batches([x.n_tokens for x in student], cfg.token_budget)),
        ]
        n_micro = sum(len(groups) for _, _, groups in parts)
        old: dict[tuple[str, int], Any] = {}  # per (part, micro-batch) (b, T), frozen at the first pass
        started = time.perf_counter()
        for epoch in range(cfg.epochs):
            total, done = StepMetrics(), 0
            for part, items, groups in parts:
                for k, group in enumerate(groups):
                    if stop():
                        self.optimizer.zero_grad(set_to_none=True)
                        raise Stopped
                    if part == "main":
                        total.add(*self._micro_step(samples, group, ref, teacher, old, k, rewards))
                    else:
                        total.add_extra(part, *self._extra_step(part, items, group, old, k))
                    done += 1
                    if on_micro is not None:
                        on_micro(epoch * n_micro + done, cfg.epochs * n_micro)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, MAX_GRAD_NORM))
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - started
        return total.result(len(samples)) | {
            "grad_norm": grad_norm,
            "seconds": seconds,
            "tokens_per_s": cfg.epochs * total.seq_tokens / seconds if seconds > 0 else 0.0,
            "n_micro_batches": float(n_micro),
            "epochs": float(cfg.epochs),
        }

    def _micro_step(self, samples: Sequence[Sample], group: list[int], ref, teacher, old, k: int, rewards):
        """Forward + backward of micro-batch ``k``; returns the arguments of :meth:`StepMetrics.add`."""
        from clawdesk.learn.objective import combined_loss

        torch, cfg = self._torch, self.config
        batch = [samples[i] for i in group]
        logp, mask = reply_logprobs(self.model, [(s.prompt_ids, s.reply_ids) for s in batch], self.device)
        if ("main", k) not in old:
            old["main", k] = logp.detach()  # (b, T) the policy before this update
        old_k = old["main", k]
        T = logp.shape[1]
        ref_t = aligned([ref[i] for i in group], T, torch.zeros_like(old_k))  # (b, T)
        teacher_t = aligned([teacher[i] for i in group], T, old_k)  # (b, T) teacher = old where no hint
        if cfg.opd_copy_ngram:  # the hint's words written back get no OPD advantage (learn/copy_mask.py)
            copied = [self._copied(s) for s in batch]
            teacher_t = torch.where(aligned(copied, T, torch.zeros_like(old_k)) > 0, old_k, teacher_t)  # (b, T)
        reward = rewards[group].to(self.device)  # (b,)
        has_hint = torch.tensor([s.has_hint for s in batch], dtype=torch.bool, device=self.device)  # (b,)
        loss, m = combined_loss(
            logp, old_k, teacher_t, ref_t, reward, has_hint, mask,
            w_binary=cfg.w_binary, w_opd=cfg.w_opd, eps=cfg.eps, eps_high=cfg.eps_high, beta_kl=cfg.beta_kl,
            keep_satisfied=cfg.opd_keep_satisfied,
            satisfied=torch.tensor([self._satisfied(s) for s in batch], dtype=torch.bool, device=self.device),
        )  # fmt: skip
        (loss * (len(batch) / len(samples))).backward()  # Σ over micro-batches = mean over the batch
        return m, len(batch), float(mask[has_hint].sum()), sum(s.n_tokens for s in batch)

    def _satisfied(self, s: Sample) -> bool:
        """Whether ``opd_keep_satisfied`` floors sample ``s``: the judge's reward (not the centred advantage)
        is positive, and for ``"end"`` the reply closed with an end-of-turn token (a reply cut at the token
        limit has no stop to keep)."""
        if s.reward <= 0:
            return False
        return self.config.opd_keep_satisfied != "end" or (bool(s.reply_ids) and s.reply_ids[-1] in self._eos_ids())

    def _eos_ids(self) -> list[int]:
        """The base model's end-of-turn token ids (its config's ``eos_token_id``, one id or a list)."""
        eos = self.model.get_base_model().config.eos_token_id
        return [eos] if isinstance(eos, int) else list(eos or [])

    def _copied(self, s: Sample):
        """(len(reply),) 1.0 where the reply copies words only the teacher's prompt has; None without a teacher."""
        from clawdesk.learn.copy_mask import copied_positions

        if not s.has_hint:
            return None
        flags = copied_positions(s.reply_ids, s.teacher_prompt_ids, s.prompt_ids, self.config.opd_copy_ngram)
        return self._torch.tensor(flags, dtype=self._torch.float32)

    def _extra_step(self, part: str, items: Sequence[Extra], group: list[int], old, k: int):
        """Forward + backward of a distillation, anchor or student micro-batch; returns ``(metrics, n, seq_tokens)``."""
        from clawdesk.learn.objective import anchor_kl, combined_loss, distill_loss, topk_kl

        torch, cfg = self._torch, self.config
        batch = [items[i] for i in group]
        pairs = [(x.prompt_ids, x.reply_ids) for x in batch]
        if part == "student" and batch[0].target_ids is not None:  # the top-K KL: no old log-probs, no clip
            logp_at, mask = reply_logprobs(self.model, pairs, self.device, at=[x.target_ids for x in batch])
            target = aligned([x.target_logp for x in batch], mask.shape[1], torch.zeros_like(logp_at.detach()))
            loss, m = topk_kl(logp_at, target, mask)  # target (b, T, K), right-aligned as logp_at
            (cfg.w_student * loss * (len(batch) / len(items))).backward()
            return m, len(batch), sum(x.n_tokens for x in batch)
        logp, mask = reply_logprobs(self.model, pairs, self.device)
        target = aligned([x.target_logp for x in batch], logp.shape[1], torch.zeros_like(logp.detach()))  # (b, T)
        if part in ("distill", "student") and (part, k) not in old:
            old[part, k] = logp.detach()  # (b, T) the policy before this update, on these replies
        if part == "distill":
            loss, m = distill_loss(
                logp, old[part, k], target, mask, eps=cfg.eps, eps_high=cfg.eps_high, max_weight=cfg.distill_max_weight
            )
            coef = cfg.w_distill
        elif part == "student":  # the OPD term alone: no reward, no KL (β = 0; old stands in for the unused ref)
            b, dev = len(batch), self.device
            loss, m = combined_loss(
                logp, old[part, k], target, old[part, k], torch.zeros(b, device=dev),
                torch.ones(b, dtype=torch.bool, device=dev), mask,
                w_binary=0.0, w_opd=1.0, eps=cfg.eps, eps_high=cfg.eps_high, beta_kl=0.0,
            )  # fmt: skip
            coef = cfg.w_student
        else:
            loss, m = anchor_kl(logp, target, mask)
            coef = cfg.anchor_coef
        (coef * loss * (len(batch) / len(items))).backward()  # Σ over micro-batches = coef × mean over the part
        return m, len(batch), sum(x.n_tokens for x in batch)
