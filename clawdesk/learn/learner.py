"""The learner: reply log-probs, micro-batches, and the LoRA model + optimizer of one training run.

:class:`Learner` owns the PEFT model and its AdamW state. One :meth:`Learner.step` is
``train.epochs`` optimizer passes over one batch of judged turns (PPO-style): the "old" log-probs
are the policy's own log-probs from the first pass's forward, detached and kept, so later passes
see ratios ≠ 1 and the clip in :func:`clawdesk.learn.objective.combined_loss` bounds how far one
batch can move the policy. With one pass (the default) the ratio is exactly 1.

:mod:`clawdesk.learn.trainer` drives it (scoring, writing and validating versions); the eval keeps
one :class:`Learner` loaded for a whole run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from clawdesk.config import TrainConfig
from clawdesk.errors import TrainError
from clawdesk.learn.samples import Sample

MAX_GRAD_NORM = 1.0


CHECKPOINT_MIN_PARAMS = 1_000_000_000  # bases this big train with gradient checkpointing


_BASE = object()  # the ``_memo`` tag of log-probs with the adapter disabled (the base never changes)


class Stopped(Exception):
    """The stop event was set; the step in progress is abandoned, nothing is written."""


class _Snapshot(list):
    """LoRA weights saved by :meth:`Learner.snapshot`, tagged with the identity of those weights.

    The tag lets :meth:`Learner.restore` bring back the held-out log-probs already computed for them.
    """

    def __init__(self, tensors: list[Any], weights: object):
        super().__init__(tensors)
        self.weights = weights


# -- log-probs of replies ------------------------------------------------------------------------


def micro_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Group indices so each group's padded size (count × its longest) stays within ``budget`` tokens.

    Longest first, so similar lengths share a group and padding stays small. A sequence longer than
    the budget gets a group of its own (it cannot be split without changing its log-probs).
    """
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if groups and lengths[groups[-1][0]] * (len(groups[-1]) + 1) <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def reply_logprobs(model, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], device: str):
    """Log-probs of each reply's tokens given its prompt, as one padded batch: ``(logp, mask)``, both ``(B, T)``.

    ``logp[b, t] = log softmax(logits at position of token t − 1)[token t]`` over reply tokens,
    T = the longest reply. Rows are left-padded so every reply ends at the last position. Position ids
    count from each row's first real token, so padding shifts no rotary position and a row's log-probs
    equal those of the row alone. Reply ``b`` occupies ``[T − len(reply_b), T)``; ``mask`` marks those
    positions (``logp`` is 0 elsewhere). Only the reply positions' final hidden states go through the
    output layer, in fp32 (:mod:`clawdesk.learn.head`): a bf16 base's own logits would add up to
    ~0.1 nat of rounding noise to every log-prob.
    """
    import torch

    from clawdesk.learn.head import head_logprobs

    if any(not p or not r for p, r in pairs):
        raise TrainError("reply_logprobs needs at least one prompt token and one reply token per sample.")
    B = len(pairs)
    L = max(len(p) + len(r) for p, r in pairs)
    T = max(len(r) for _, r in pairs)
    ids = torch.zeros((B, L), dtype=torch.long)  # (B, L) pad id 0: masked, never attended to
    attn = torch.zeros((B, L), dtype=torch.long)  # (B, L)
    mask = torch.zeros((B, T), dtype=torch.bool)  # (B, T)
    for b, (p, r) in enumerate(pairs):
        n = len(p) + len(r)
        ids[b, L - n :] = torch.tensor([*p, *r], dtype=torch.long)
        attn[b, L - n :] = 1
        mask[b, T - len(r) :] = True
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # (B, L)
    ids, attn, pos, mask = ids.to(device), attn.to(device), pos.to(device), mask.to(device)
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model  # PeftModel → its LoRA-injected model
    if getattr(lm.config, "final_logit_softcapping", None):
        raise TrainError(f"{lm.config.model_type} soft-caps its logits; the learner's log-prob head does not.")
    # The decoder stack alone (the LoRA layers and disable_adapter() act inside it), then the head ourselves.
    hidden = lm.get_decoder()(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False).last_hidden_state
    kept = hidden[:, L - T - 1 : -1][mask]  # (N, H): positions L−T−1 .. L−2 predict tokens L−T .. L−1; replies only
    targets = ids[:, L - T :][mask]  # (N,)
    values = head_logprobs(kept, lm.get_output_embeddings(), targets)  # (N,) fp32
    logp = torch.zeros((B, T), dtype=torch.float32, device=device).masked_scatter(mask, values)  # (B, T)
    return logp, mask


def _aligned(rows: Sequence[Any], T: int, fill):
    """Stack 1-D per-sample reply tensors right-aligned into ``(B, T)``, as :func:`reply_logprobs` lays them out."""
    out = fill.clone()  # (B, T)
    for b, row in enumerate(rows):
        if row is not None:
            out[b, T - row.shape[0] :] = row.to(out.device, out.dtype)
    return out


# -- the learner ---------------------------------------------------------------------------------


class Learner:
    """The PEFT model and optimizer of one training run."""

    def __init__(
        self, model, info, config: TrainConfig, *, parent_dir: Path | None, gradient_checkpointing: bool | None = None
    ):
        import torch
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
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self._torch = torch
        self.optimizer = self._new_optimizer()
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

    def set_lr(self, lr: float) -> None:
        """The learning rate of the next optimizer steps (the trainer's guard retries a step at a smaller one)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def snapshot(self) -> list[Any]:
        return _Snapshot([p.detach().clone() for p in self.params], self._weights)

    def restore(self, snapshot: list[Any]) -> None:
        """Put back the LoRA weights of ``snapshot``; the optimizer restarts (its moments saw the bad step)."""
        with self._torch.no_grad():
            for p, saved in zip(self.params, snapshot, strict=True):
                p.copy_(saved)
        self.optimizer = self._new_optimizer()
        # Exactly the snapshot's weights again: its memoized log-probs hold (another learner's tag has none here).
        self._weights = getattr(snapshot, "weights", None) or object()

    def logprobs_each(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, adapter: bool = True):
        """No-grad reply log-probs, one CPU tensor ``(len(reply),)`` per pair, batched by the token budget."""
        torch = self._torch
        out: list[Any] = [None] * len(pairs)
        self.model.eval()
        ctx = contextlib.nullcontext() if adapter else self.model.disable_adapter()
        with torch.no_grad(), ctx:
            for group in micro_batches([len(p) + len(r) for p, r in pairs], self.config.token_budget):
                logp, mask = reply_logprobs(self.model, [pairs[i] for i in group], self.device)  # (b, T)
                for row, i in enumerate(group):
                    out[i] = logp[row][mask[row]].cpu()
        return out

    def score(self, samples: Sequence[Sample]) -> tuple[list[Any], list[Any]]:
        """(ref, teacher) log-probs per sample with the adapter disabled; teacher is None without a hint."""
        ref = self.logprobs_each([(s.prompt_ids, s.reply_ids) for s in samples], adapter=False)
        hinted = [i for i, s in enumerate(samples) if s.has_hint]
        teach = self.logprobs_each(
            [(samples[i].teacher_prompt_ids, samples[i].reply_ids) for i in hinted], adapter=False
        )
        teacher: list[Any] = [None] * len(samples)
        for i, lp in zip(hinted, teach, strict=True):
            teacher[i] = lp
        return ref, teacher

    def mean_logprob(self, samples: Sequence[Sample]) -> dict[str, Any]:
        """Token-weighted mean reply log-prob under the current adapter, and whether every value is finite.

        Replies already scored under the current weights are not scored again (see ``_memo``).
        """
        each = self._remembered([(s.prompt_ids, s.reply_ids) for s in samples], adapter=True)
        n = sum(int(x.numel()) for x in each)
        total = sum(float(x.double().sum()) for x in each)
        finite = all(bool(self._torch.isfinite(x).all()) for x in each)
        return {"mean": total / n if n else 0.0, "n_tokens": n, "finite": finite}

    def mean_nll(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, adapter: bool) -> float:
        """Mean negative log-prob per reply token of ``pairs``, with the current adapter or without it.

        Remembered like :meth:`mean_logprob`; the base's values (``adapter=False``) for the learner's
        whole life, since the base never changes.
        """
        each = self._remembered(pairs, adapter=adapter)
        n = sum(int(x.numel()) for x in each)
        return -sum(float(x.double().sum()) for x in each) / n if n else 0.0

    def _remembered(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, adapter: bool) -> list[Any]:
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

    def step(self, samples: Sequence[Sample], ref, teacher, *, stop: Callable[[], bool], on_micro=None):
        """``train.epochs`` optimizer passes over ``samples``; returns the last pass's metrics.

        Each pass accumulates the gradient of every micro-batch, each weighted by its share of
        samples (so a pass follows the mean over the batch), clips it and makes one AdamW step.
        The old log-probs are taken, detached, from the first pass's own forward (the policy
        before this update is exactly the one computing them) and kept for the later passes.
        """
        torch, cfg = self._torch, self.config
        self._weights = object()  # the LoRA is about to change: memoized log-probs no longer apply
        self.model.train()  # transformers only checkpoints activations in training mode
        groups = micro_batches([s.n_tokens for s in samples], cfg.token_budget)
        old: list[Any] = [None] * len(groups)  # per micro-batch (b, T), frozen at the first pass
        started = time.perf_counter()
        for epoch in range(cfg.epochs):
            total = _MetricSum()
            for k, group in enumerate(groups):
                if stop():
                    self.optimizer.zero_grad(set_to_none=True)
                    raise Stopped
                m = self._micro_step(samples, group, ref, teacher, old, k)
                total.add(*m)
                if on_micro is not None:
                    on_micro(epoch * len(groups) + k + 1, cfg.epochs * len(groups))
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, MAX_GRAD_NORM))
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - started
        return total.result(len(samples)) | {
            "grad_norm": grad_norm,
            "seconds": seconds,
            "tokens_per_s": cfg.epochs * total.seq_tokens / seconds if seconds > 0 else 0.0,
            "n_micro_batches": float(len(groups)),
            "epochs": float(cfg.epochs),
        }

    def _micro_step(self, samples: Sequence[Sample], group: list[int], ref, teacher, old: list[Any], k: int):
        """Forward + backward of micro-batch ``k``; returns the arguments of :meth:`_MetricSum.add`."""
        from clawdesk.learn.objective import combined_loss

        torch, cfg = self._torch, self.config
        batch = [samples[i] for i in group]
        logp, mask = reply_logprobs(self.model, [(s.prompt_ids, s.reply_ids) for s in batch], self.device)
        if old[k] is None:
            old[k] = logp.detach()  # (b, T) the policy before this update
        T = logp.shape[1]
        ref_t = _aligned([ref[i] for i in group], T, torch.zeros_like(old[k]))  # (b, T)
        teacher_t = _aligned([teacher[i] for i in group], T, old[k])  # (b, T) teacher = old where no hint
        reward = torch.tensor([s.reward for s in batch], dtype=torch.float32, device=self.device)  # (b,)
        has_hint = torch.tensor([s.has_hint for s in batch], dtype=torch.bool, device=self.device)  # (b,)
        loss, m = combined_loss(
            logp, old[k], teacher_t, ref_t, reward, has_hint, mask,
            w_binary=cfg.w_binary, w_opd=cfg.w_opd, eps=cfg.eps, eps_high=cfg.eps_high, beta_kl=cfg.beta_kl,
        )  # fmt: skip
        (loss * (len(batch) / len(samples))).backward()  # Σ over micro-batches = mean over the batch
        return m, len(batch), float(mask[has_hint].sum()), sum(s.n_tokens for s in batch)


class _MetricSum:
    """Combines combined_loss metrics of micro-batches into the batch's (token- or sample-weighted)."""

    TOKEN_MEANS = ("pg_loss", "kl", "adv_mean", "ratio_mean", "clip_frac")

    def __init__(self):
        self.sums: dict[str, float] = {}
        self.seq_tokens = 0  # prompt + reply tokens through forward and backward

    def _add(self, key: str, value: float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + value

    def add(self, m: dict[str, float], n_samples: int, hinted_tokens: float, seq_tokens: int) -> None:
        for key in self.TOKEN_MEANS:
            self._add(key, m[key] * m["n_tokens"])
        self._add("loss", m["loss"] * n_samples)
        self._add("reward_mean", m["reward_mean"] * m["n_samples"])
        self._add("opd_adv_mean", m["opd_adv_mean"] * hinted_tokens)
        self._add("hinted_tokens", hinted_tokens)
        for key in ("n_tokens", "n_samples", "n_hinted"):
            self._add(key, m[key])
        self.seq_tokens += seq_tokens

    def result(self, n_batch: int) -> dict[str, float]:
        s, tok = self.sums, self.sums.get("n_tokens", 0.0)
        out = {key: s.get(key, 0.0) / tok if tok else 0.0 for key in self.TOKEN_MEANS}
        out["loss"] = s.get("loss", 0.0) / n_batch
        out["reward_mean"] = s.get("reward_mean", 0.0) / s["n_samples"] if s.get("n_samples") else 0.0
        out["opd_adv_mean"] = s.get("opd_adv_mean", 0.0) / s["hinted_tokens"] if s.get("hinted_tokens") else 0.0
        out |= {key: s.get(key, 0.0) for key in ("n_tokens", "n_samples", "n_hinted")}
        return out
