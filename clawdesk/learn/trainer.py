"""The on-device learner: LoRA steps on judged turns, one adapter version per step, validated before use.

One run (:func:`train`, or ``python -m clawdesk.learn.trainer`` as the separate process the TUI
starts) loads the base weights once, continues from the newest ready adapter of that base (or a fresh
LoRA), and then, for every full batch of ``train.batch_size`` ready samples:

1. *scoring* — with the adapter disabled (``PeftModel.disable_adapter()``, the very same weights the
   served GGUF holds), the reference log-probs of each reply given its prompt and the teacher
   log-probs given the hint-enhanced prompt; plus the held-out replies' mean log-prob under the
   current adapter, the "before" of the collapse check;
2. *step* — micro-batches of at most ``train.token_budget`` padded tokens, gradient accumulation with
   each micro-batch's loss weighted by its share of samples (so the step follows the mean over the
   batch), gradient clipping, one AdamW step. The "old" log-probs are the current adapter's own
   log-probs from the same forward, detached: the policy before this update is exactly the one
   computing them, so a separate no-grad pass would only repeat the work;
3. *writing* / *validating* — see :mod:`clawdesk.learn.versions`; a version that fails validation
   is kept as ``'rejected'`` and training goes on from the weights before it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawdesk.config import TrainConfig
from clawdesk.errors import ClawDeskError, ConfigError, TrainError
from clawdesk.learn import versions
from clawdesk.learn.samples import Sample, count_ready, heldout_replies, ready_samples
from clawdesk.store.log import Store, now_iso

HELDOUT_N = 8  # earlier replies scored before/after each step to catch a collapsing adapter
MAX_GRAD_NORM = 1.0
PHASES = ("loading", "scoring", "step", "writing", "validating", "done", "skipped")


@dataclass(frozen=True)
class TrainProgress:
    """One progress report; the subprocess prints each as a JSON line."""

    phase: str  # one of PHASES
    step: int  # 1-based step of this run (0 while loading / when skipped)
    steps: int  # steps this run intends to make
    message: str
    metrics: dict[str, float] = field(default_factory=dict)


class _Stopped(Exception):
    """The stop event was set; the step in progress is abandoned, nothing is written."""


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
    T = the longest reply. Rows are left-padded so every reply ends at the last position: then only
    the last T + 1 positions need logits (``logits_to_keep``), which keeps the ``(B, T, vocab)``
    tensor small for large vocabularies. Position ids count from each row's first real token, so
    padding shifts no rotary position and a row's log-probs equal those of the row alone.
    Reply ``b`` occupies ``[T − len(reply_b), T)``; ``mask`` marks those positions.
    """
    import torch

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
    ids, attn, pos = ids.to(device), attn.to(device), pos.to(device)
    out = model(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=T + 1, use_cache=False)
    logits = out.logits[:, :-1].float()  # (B, T, V): positions L−T−1 .. L−2 predict tokens L−T .. L−1
    targets = ids[:, L - T :]  # (B, T)
    logp = logits.gather(-1, targets[..., None]).squeeze(-1) - logits.logsumexp(-1)  # (B, T)
    return logp, mask.to(device)


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

    def __init__(self, model, info, config: TrainConfig, *, parent_dir: Path | None, gradient_checkpointing=True):
        import torch
        from peft import LoraConfig, PeftModel, get_peft_model

        from clawdesk.learn.gguf_lora import TARGET_MODULES  # the modules the GGUF writer can map

        self.info, self.config, self.device = info, config, info.device
        if parent_dir is not None:
            self.model = PeftModel.from_pretrained(model, str(parent_dir), is_trainable=True)
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

    def _new_optimizer(self):
        # No weight decay: it would pull the LoRA towards zero between feedback batches, i.e. slowly forget.
        return self._torch.optim.AdamW(self.params, lr=self.config.lr, weight_decay=0.0)

    def snapshot(self) -> list[Any]:
        return [p.detach().clone() for p in self.params]

    def restore(self, snapshot: list[Any]) -> None:
        """Put back the LoRA weights of ``snapshot``; the optimizer restarts (its moments saw the bad step)."""
        with self._torch.no_grad():
            for p, saved in zip(self.params, snapshot, strict=True):
                p.copy_(saved)
        self.optimizer = self._new_optimizer()

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
        """Token-weighted mean reply log-prob under the current adapter, and whether every value is finite."""
        each = self.logprobs_each([(s.prompt_ids, s.reply_ids) for s in samples])
        n = sum(int(x.numel()) for x in each)
        total = sum(float(x.double().sum()) for x in each)
        finite = all(bool(self._torch.isfinite(x).all()) for x in each)
        return {"mean": total / n if n else 0.0, "n_tokens": n, "finite": finite}

    def step(self, samples: Sequence[Sample], ref, teacher, *, stop: Callable[[], bool], on_micro=None):
        """One optimizer step on ``samples`` (see the module docstring); returns the step's metrics."""
        from clawdesk.learn.objective import combined_loss

        torch, cfg = self._torch, self.config
        self.model.train()  # transformers only checkpoints activations in training mode
        groups = micro_batches([s.n_tokens for s in samples], cfg.token_budget)
        total = _MetricSum()
        started = time.perf_counter()
        for k, group in enumerate(groups):
            if stop():
                self.optimizer.zero_grad(set_to_none=True)
                raise _Stopped
            batch = [samples[i] for i in group]
            logp, mask = reply_logprobs(self.model, [(s.prompt_ids, s.reply_ids) for s in batch], self.device)
            old = logp.detach()  # (b, T) the policy before this update
            T = logp.shape[1]
            ref_t = _aligned([ref[i] for i in group], T, torch.zeros_like(old))  # (b, T)
            teacher_t = _aligned([teacher[i] for i in group], T, old)  # (b, T) teacher = old where no hint
            reward = torch.tensor([s.reward for s in batch], dtype=torch.float32, device=self.device)  # (b,)
            has_hint = torch.tensor([s.has_hint for s in batch], dtype=torch.bool, device=self.device)  # (b,)
            loss, m = combined_loss(
                logp, old, teacher_t, ref_t, reward, has_hint, mask,
                w_binary=cfg.w_binary, w_opd=cfg.w_opd, eps=cfg.eps, eps_high=cfg.eps_high, beta_kl=cfg.beta_kl,
            )  # fmt: skip
            (loss * (len(batch) / len(samples))).backward()  # Σ over micro-batches = mean over the batch
            total.add(m, len(batch), float(mask[has_hint].sum()), sum(s.n_tokens for s in batch))
            if on_micro is not None:
                on_micro(k + 1, len(groups))
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, MAX_GRAD_NORM))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - started
        return total.result(len(samples)) | {
            "grad_norm": grad_norm,
            "seconds": seconds,
            "tokens_per_s": total.seq_tokens / seconds if seconds > 0 else 0.0,
            "n_micro_batches": float(len(groups)),
        }


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


# -- one run -------------------------------------------------------------------------------------


def train(
    db_path: Path,
    adapters_dir: Path,
    base_gguf: Path,
    base_name: str,
    base_sha256: str,
    config: TrainConfig,
    *,
    steps: int | None = None,
    on_progress: Callable[[TrainProgress], None] | None = None,
    stop: threading.Event | None = None,
) -> list[int]:
    """Train up to ``steps`` versions (None: as many full batches as ready samples allow); return their numbers.

    Returned versions include rejected ones (see ``AdapterVersion.status``). With fewer than
    ``config.batch_size`` ready samples nothing is loaded and one ``'skipped'`` progress is reported.
    Setting ``stop`` abandons the step in progress (nothing of it is written) and returns.
    """
    if steps is not None and steps < 1:
        raise TrainError(f"steps must be at least 1, got {steps}.")
    emit = on_progress or (lambda _p: None)
    store = Store.open(Path(db_path))
    try:
        bs = config.batch_size
        ready = count_ready(store, base_sha256)
        n_steps = ready // bs if steps is None else min(steps, ready // bs)
        if n_steps == 0:
            message = f"{ready} of {bs} samples ready; training starts when a batch is full"
            emit(TrainProgress("skipped", 0, 0, message, {"ready": float(ready), "batch_size": float(bs)}))
            return []
        with versions.run_lock(Path(adapters_dir)):
            run = _Run(
                store, Path(adapters_dir), Path(base_gguf), base_name, base_sha256, config, n_steps, emit,
                stop.is_set if stop is not None else (lambda: False),
            )  # fmt: skip
            return run.execute()
    finally:
        store.close()


@dataclass
class _Run:
    """One call of :func:`train` once it has decided to train: the loop over steps and each step's version."""

    store: Store
    adapters_dir: Path
    base_gguf: Path
    base_name: str
    base_sha256: str
    config: TrainConfig
    n_steps: int
    emit: Callable[[TrainProgress], None]
    stopped: Callable[[], bool]

    def progress(self, phase: str, step: int, message: str, metrics: dict[str, float] | None = None) -> None:
        self.emit(TrainProgress(phase, step, self.n_steps, message, metrics or {}))

    def execute(self) -> list[int]:
        from clawdesk.learn.base_model import load_base

        if self.stopped():
            self.progress("done", 0, "stopped before loading")
            return []
        cfg = self.config
        model, info = load_base(
            self.base_gguf, hf_checkpoint=cfg.hf_checkpoint, on_status=lambda msg: self.progress("loading", 0, msg)
        )
        parent = versions.latest_ready(self.store, self.base_sha256)
        if parent is not None:
            self.progress("loading", 0, f"continuing from v{parent.version}")
        learner = Learner(model, info, cfg, parent_dir=parent.peft_dir if parent else None)
        made: list[int] = []
        try:
            for step in range(1, self.n_steps + 1):
                batch = ready_samples(self.store, self.base_sha256, limit=cfg.batch_size)
                if len(batch) < cfg.batch_size or self.stopped():
                    break
                version = self.one_step(learner, batch, step, parent)
                made.append(version.version)
                if version.ready:
                    parent = version
        except _Stopped:
            self.progress("done", len(made), "stopped; the step in progress was dropped")
            return made
        summary = ", ".join(f"v{v}" for v in made) or "no version"
        self.progress("done", len(made), f"finished: {summary}", {"versions": float(len(made))})
        return made

    def one_step(self, learner: Learner, batch: list[Sample], step: int, parent) -> versions.AdapterVersion:
        cfg, info, n = self.config, learner.info, self.n_steps
        for s in batch:
            ids = [*s.prompt_ids, *s.reply_ids, *(s.teacher_prompt_ids or [])]
            if max(ids) >= info.vocab_size or min(ids) < 0:
                raise TrainError(
                    f"turn {s.turn_id} has token ids outside the base's vocabulary ({info.vocab_size}); it was not "
                    f"served by {self.base_name}. Check that train.hf_checkpoint matches the served model."
                )
        heldout = [
            s
            for s in heldout_replies(self.store, self.base_sha256, {s.turn_id for s in batch}, n=HELDOUT_N)
            if s.n_tokens <= cfg.token_budget
        ]
        self.progress("scoring", step, f"scoring {len(batch)} samples and {len(heldout)} held-out replies")
        before = learner.mean_logprob(heldout) if heldout else None
        ref, teacher = learner.score(batch)
        if self.stopped():
            raise _Stopped
        snapshot = learner.snapshot()
        import torch

        try:
            metrics = learner.step(
                batch, ref, teacher, stop=self.stopped,
                on_micro=lambda k, m: self.progress("step", step, f"step {step}/{n}: micro-batch {k}/{m}"),
            )  # fmt: skip
        except torch.OutOfMemoryError as exc:
            raise TrainError(
                f"Out of memory in a training step ({exc}). Lower train.token_budget (now {cfg.token_budget}) in "
                "config.toml; each micro-batch holds that many tokens."
            ) from exc
        self.progress(
            "step", step,
            f"step {step}/{n}: loss {metrics['loss']:.4f}, reward {metrics['reward_mean']:+.2f}, "
            f"{metrics['tokens_per_s']:.0f} tok/s",
            metrics,
        )  # fmt: skip

        number = versions.next_version(self.store, self.adapters_dir)
        self.progress("writing", step, f"writing v{number}")
        staged = versions.staging_dir(self.adapters_dir, number)
        lora = versions.write_adapter(
            learner.model, staged, arch=info.arch, n_head=info.n_head, n_head_kv=info.n_head_kv
        )

        self.progress("validating", step, f"validating v{number}")
        after = learner.mean_logprob(heldout or batch[:1])  # no held-out yet: still prove the outputs finite
        validation = versions.validate(
            self.base_gguf, staged / versions.ADAPTER_GGUF, [*batch[0].prompt_ids[-8:], *batch[0].reply_ids[:8]],
            heldout_ids=[s.turn_id for s in heldout], before=before, after=after, max_drop=cfg.max_logprob_drop,
        )  # fmt: skip
        status = "ready" if validation["passed"] else "rejected"
        record = {
            "version": number,
            "status": status,
            "parent_version": parent.version if parent else None,
            "base_name": self.base_name,
            "base_sha256": self.base_sha256,
            "metrics": metrics,
            "validation": validation,
            "note": validation["problems"],
            "created_at": now_iso(),
        }
        base = {"name": self.base_name, "sha256": self.base_sha256, "gguf": str(self.base_gguf)}
        base |= {"train_source": info.source, "arch": info.arch, "quantized": info.quantized, "dtype": info.dtype}
        samples = [{"turn_id": s.turn_id, "reward": s.reward, "hint": s.hint, "has_teacher": s.has_hint} for s in batch]
        metadata = {k: v for k, v in record.items() if k not in ("base_name", "base_sha256")}
        metadata |= {"base": base, "lora": lora, "config": dataclasses.asdict(cfg), "samples": samples}
        versions.write_metadata(staged, metadata)
        path = versions.publish(staged, self.adapters_dir, number)
        version = versions.record_version(self.store, path=path, samples=batch, **record)
        if not version.ready:
            learner.restore(snapshot)
        held = {k: v for k, v in validation["heldout"].items() if isinstance(v, float)}
        message = f"v{number} {status}" + (f": {version.note}" if version.note else "")
        self.progress("validating", step, message, {"version": float(number), "ready": float(version.ready)} | held)
        return version


# -- the separate process --------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m clawdesk.learn.trainer``: one JSON object per line on stdout per progress, exit 0 on success.

    Each line is a :class:`TrainProgress` as a dict. A :class:`ClawDeskError` ends the run with the
    line ``{"phase": "error", "error": <message>, "kind": <class name>}`` and exit code 1. SIGTERM
    stops cleanly at the next micro-batch (the step in progress is dropped).
    """
    if hasattr(os, "nice"):
        os.nice(10)  # the chat in the other process comes first
    parser = argparse.ArgumentParser(prog="python -m clawdesk.learn.trainer", description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, type=Path, help="the ClawDesk SQLite log")
    parser.add_argument("--adapters", required=True, type=Path, help="the adapters dir (v1, v2, ... live here)")
    parser.add_argument("--base", required=True, type=Path, help="the served GGUF")
    parser.add_argument("--base-name", required=True)
    parser.add_argument("--base-sha", required=True, help="sha256 of the served GGUF")
    parser.add_argument("--steps", type=int, default=None, help="at most this many steps (default: all full batches)")
    parser.add_argument("--batch-size", type=int, default=None, help="samples per step (default: train.batch_size)")
    parser.add_argument("--config-home", type=Path, default=None, help="dir holding config.toml ([train] section)")
    args = parser.parse_args(argv)

    out = sys.stdout
    sys.stdout = sys.stderr  # library chatter must not break the JSON-lines protocol on the real stdout

    def emit(progress: TrainProgress) -> None:
        out.write(json.dumps(dataclasses.asdict(progress)) + "\n")
        out.flush()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # finish cleanly at the next micro-batch
    try:
        config = _train_config(args.config_home, args.batch_size)
        _limit_threads()
        train(args.db, args.adapters, args.base, args.base_name, args.base_sha, config,
              steps=args.steps, on_progress=emit, stop=stop)  # fmt: skip
    except ClawDeskError as err:
        out.write(json.dumps({"phase": "error", "error": str(err), "kind": type(err).__name__}) + "\n")
        out.flush()
        return 1
    finally:
        sys.stdout = out
    return 0


def _train_config(config_home: Path | None, batch_size: int | None) -> TrainConfig:
    from clawdesk.config import load_config

    config = load_config(config_home.expanduser().resolve()).train if config_home else TrainConfig()
    if batch_size is not None:
        try:
            config = dataclasses.replace(config, batch_size=batch_size)
        except ValueError as exc:
            raise ConfigError(f"--batch-size {batch_size}: {exc}") from exc
    return config


def _limit_threads() -> None:
    # Half the cores, like the chat engine's default: torch and llama.cpp threads fighting over the
    # same cores slow both down far more than splitting them (FIELD-NOTES).
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))


if __name__ == "__main__":
    sys.exit(main())
