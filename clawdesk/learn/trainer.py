"""The on-device learner: LoRA steps on judged turns, one adapter version per step, validated before use.

One run (:func:`train`, or ``python -m clawdesk.learn.trainer`` as the separate process that
:mod:`clawdesk.loop` starts) loads the base weights once, continues from the newest ready adapter of
that base (or a fresh LoRA), and then, for every full batch of ``train.batch_size`` ready samples:

1. *scoring* — with the adapter disabled (``PeftModel.disable_adapter()``, the very same weights the
   served GGUF holds), the reference log-probs of each reply given its prompt and the teacher
   log-probs given the hint-enhanced prompt; plus the held-out replies' mean log-prob under the
   current adapter, the "before" of the collapse check (the same replies for every step of a run,
   so it is the previous step's "after", not scored again); with the levers on (docs/learning.md,
   "Levers"), the teacher's sampled replies for context distillation (``train.distill_samples``), the
   adapter's own replies for its teacher (``train.student_samples``) and, once per run, the base's
   replies to the anchor prompts (``train.anchor_coef``);
2. *step* — :meth:`clawdesk.learn.learner.Learner.step`: ``train.epochs`` AdamW passes over the
   batch in micro-batches of at most ``train.token_budget`` padded tokens, the "old" log-probs frozen
   at the first pass;
3. *writing* / *validating* — see :mod:`clawdesk.learn.versions` (and :mod:`clawdesk.learn.guard`
   for the general-ability check); a version that fails validation is kept as ``'rejected'`` and
   training goes on from the weights before it. A version that passes is then asked which
   preference items it carries (:mod:`clawdesk.learn.consolidate`): those leave the prompt as
   *learned*, learned ones it lost come back; the numbers go into its ``validation["memory"]``.
   With ``train.keep_optimizer`` the AdamW moments are
   written beside the PEFT files (:mod:`clawdesk.learn.optim_state`) and the next run starts from them.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from clawdesk.config import TrainConfig
from clawdesk.errors import AdapterError, ClawDeskError, ConfigError, TrainError
from clawdesk.learn import consolidate, optim_state, versions
from clawdesk.learn.anchor import default_anchor_path, load_anchor_prompts
from clawdesk.learn.extras import Extra, lever_samples
from clawdesk.learn.form_probe import FormProbe, load_form_probe
from clawdesk.learn.guard import GuardSet, default_guard_path, load_guard_set
from clawdesk.learn.guard import check as guard_check
from clawdesk.learn.learner import Learner, Stopped
from clawdesk.learn.pause import continue_if_parent_dies
from clawdesk.learn.protocol import TrainerFailed, TrainerMessage, TrainerStarted, TrainProgress, encode
from clawdesk.learn.samples import Sample, count_ready, heldout_replies, ready_samples
from clawdesk.store.log import Store, now_iso
from clawdesk.store.prefs import list_preferences

HELDOUT_N = 8  # earlier replies scored before/after each step to catch a collapsing adapter
# Learning-rate scales a step is tried at until it passes the general-ability guard (see _Run.guarded_step).
GUARD_LR_SCALES = (1.0, 0.5, 0.25)
PHASES = ("loading", "scoring", "step", "writing", "validating", "done", "skipped")


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
    learner: Learner | None = None,
    system_prompt: str = "",
) -> list[int]:
    """Train up to ``steps`` versions (None: as many full batches as ready samples allow); return their numbers.

    Returned versions include rejected ones (see ``AdapterVersion.status``). With fewer than
    ``config.batch_size`` ready samples nothing is loaded and one ``'skipped'`` progress is reported.
    Setting ``stop`` abandons the step in progress (nothing of it is written) and returns.
    ``learner`` is an already loaded :class:`Learner` (the eval keeps one for a whole run, so no
    step reloads the base); it must hold the weights of the newest ready version, as it does when
    it made them. Without it the base is loaded and the newest ready version continued. Running out
    of memory anywhere in the run (GPU or RAM: loading, scoring, steps, writing, validation) raises one
    :class:`TrainError` that names the phase and what frees memory. ``system_prompt`` is the chat's
    (``chat.system_prompt``): the general-ability check renders its texts under it, as the chat would.
    """
    if steps is not None and steps < 1:
        raise TrainError(f"steps must be at least 1, got {steps}.")
    emit = on_progress or (lambda _p: None)
    store = Store.open(Path(db_path))
    try:
        bs = config.batch_size
        ready = count_ready(store, base_sha256, step_reward=config.step_reward)
        n_steps = ready // bs if steps is None else min(steps, ready // bs)
        if n_steps == 0:
            message = f"{ready} of {bs} samples ready; training starts when a batch is full"
            emit(TrainProgress("skipped", 0, 0, message, {"ready": float(ready), "batch_size": float(bs)}))
            return []
        with versions.run_lock(Path(adapters_dir)):
            run = _Run(
                store, Path(adapters_dir), Path(base_gguf), base_name, base_sha256, config, n_steps, emit,
                stop.is_set if stop is not None else (lambda: False), system_prompt=system_prompt,
            )  # fmt: skip
            try:
                return run.execute(learner)
            except _out_of_memory_types() as exc:  # one handler for load, scoring, steps, writing and validation
                raise out_of_memory_error(exc, run.phase, run.device, config) from exc
    finally:
        store.close()


def _out_of_memory_types() -> tuple[type[BaseException], ...]:
    import torch

    return torch.OutOfMemoryError, MemoryError


_PHASE_WORDS = {"loading": "loading the base model", "scoring": "scoring the batch", "step": "a training step"}


def out_of_memory_error(exc: BaseException, phase: str, device: str, config: TrainConfig) -> TrainError:
    """The :class:`TrainError` for an out-of-memory anywhere in a run: where it happened and what frees memory."""
    if device == "auto":  # the base was not loaded yet: name where it was going
        from clawdesk.learn.base_model import resolve_device

        device = resolve_device(device)
    where = _PHASE_WORDS.get(phase, f"{phase} the adapter" if phase in ("writing", "validating") else phase)
    detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    fixes = [
        f"lower train.token_budget (now {config.token_budget}; each micro-batch holds that many tokens) or "
        f"train.batch_size (now {config.batch_size}) in config.toml"
    ]
    if device.startswith("cuda"):
        fixes.append("close other programs using the GPU (nvidia-smi lists them; the chat's llama.cpp holds its share)")
        fixes.append('or set train.device = "cpu"')
    else:
        fixes.append("close other programs to free RAM, or set train.load_in_4bit = true (a 4-bit base)")
    return TrainError(f"Out of memory on {device} while {where} ({detail}). To fit: " + "; ".join(fixes) + ".")


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
    phase: str = "loading"  # the last phase reported: an out-of-memory error names it
    device: str = ""  # where the learner runs, once known (the OOM advice differs for GPU and CPU)
    system_prompt: str = ""  # the chat's: the guard texts are rendered under it
    planned: set[int] = field(default_factory=set)  # turns of the batches this run intends to train on
    guard: GuardSet | None = None  # the general-ability check's texts, once loaded
    guard_skipped: str = ""  # why there is no general-ability check, when there is none
    anchor_prompts: list[list[int]] = field(default_factory=list)  # the anchor's prompts, when train.anchor_coef > 0
    form_probe: FormProbe | None = None  # the behaviour test's prompts, loaded at the first memory check

    def __post_init__(self) -> None:
        self.device = self.config.device

    def progress(self, phase: str, step: int, message: str, metrics: dict[str, float] | None = None) -> None:
        self.phase = phase
        self.emit(TrainProgress(phase, step, self.n_steps, message, metrics or {}))

    def execute(self, learner: Learner | None) -> list[int]:
        if self.stopped():
            self.progress("done", 0, "stopped before loading")
            return []
        cfg = self.config
        parent = self.intact_parent()
        if learner is None:
            learner = load_learner(self.base_gguf, cfg, parent, on_status=lambda msg: self.progress("loading", 0, msg))
        self.device = learner.info.device
        if cfg.keep_optimizer:
            self.progress("loading", 0, f"optimizer moments: {learner.optimizer_source}")
        self.load_guard()
        if cfg.anchor_coef > 0:
            self.anchor_prompts = load_anchor_prompts(
                self.base_gguf, default_anchor_path(), system_prompt=self.system_prompt
            )
        # Every turn this run means to train on is kept out of the held-out set of every step, so the set
        # stays the same through the run: one step's "after" is then the next one's "before", which the
        # learner has already computed (Learner.mean_logprob memoizes per weights) instead of new replies.
        planned = ready_samples(self.store, self.base_sha256, limit=self.n_steps * cfg.batch_size,
                                step_reward=cfg.step_reward)  # fmt: skip
        self.planned = {s.turn_id for s in planned}
        made: list[int] = []
        try:
            for step in range(1, self.n_steps + 1):
                batch = ready_samples(self.store, self.base_sha256, limit=cfg.batch_size, step_reward=cfg.step_reward)
                if len(batch) < cfg.batch_size or self.stopped():
                    break
                version = self.one_step(learner, batch, step, parent)
                made.append(version.version)
                if version.ready:
                    parent = version
        except Stopped:
            self.progress("done", len(made), "stopped; the step in progress was dropped")
            return made
        summary = ", ".join(f"v{v}" for v in made) or "no version"
        self.progress("done", len(made), f"finished: {summary}", {"versions": float(len(made))})
        return made

    def load_guard(self) -> None:
        if self.config.max_ppl_ratio == 0:
            self.guard_skipped = "train.max_ppl_ratio = 0 turns it off"
            return
        path = default_guard_path()
        if not path.is_file():
            self.guard_skipped = f"no guard text set at {path} (it ships with the source checkout)"
            self.progress("loading", 0, f"general-ability check skipped: {self.guard_skipped}")
            return
        self.guard = load_guard_set(self.base_gguf, path, system_prompt=self.system_prompt)

    def intact_parent(self) -> versions.AdapterVersion | None:
        """The newest ready version whose files can be continued from; damaged newer ones are skipped, said aloud.

        Without this a damaged newest version would stop learning for good: every run continues
        from the newest ready version. The skipped version stays listed (and the chat refuses it).
        """
        from clawdesk.gguf.adapters import check_version_dir

        ready = [v for v in versions.list_versions(self.store, self.base_sha256) if v.status == "ready"]
        for row in reversed(ready):
            try:
                check_version_dir(row.path, base_sha256=self.base_sha256, peft=True)
            except AdapterError as err:
                self.progress("loading", 0, f"not continuing from v{row.version}: {err}")
                continue
            return row
        return None

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
            for s in heldout_replies(
                self.store, self.base_sha256, self.planned | {s.turn_id for s in batch}, n=HELDOUT_N
            )
            if s.n_tokens <= cfg.token_budget
        ]
        self.progress("scoring", step, f"scoring {len(batch)} samples and {len(heldout)} held-out replies")
        before = learner.mean_logprob(heldout) if heldout else None
        ref, teacher = learner.score(batch)
        extras = lever_samples(
            learner, batch, anchor_prompts=self.anchor_prompts, progress=lambda msg: self.progress("scoring", step, msg)
        )
        if self.stopped():
            raise Stopped
        snapshot = learner.snapshot()
        metrics, guard = self.guarded_step(learner, batch, ref, teacher, step, snapshot, **extras)
        # Which reward the batch's tool steps got (stepwise o + Σrᵢ/m, or outcome o): the ablation is read from here.
        metrics |= {"step_reward": cfg.step_reward, "n_step_samples": float(sum(s.step_id is not None for s in batch))}
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
        if cfg.keep_optimizer:  # the moments of this version's weights, for the run that continues from it
            optim_state.save(staged / optim_state.OPTIMIZER_FILE, learner.optimizer_tensors())

        self.progress("validating", step, f"validating v{number}")
        after = learner.mean_logprob(heldout or batch[:1])  # no held-out yet: still prove the outputs finite
        validation = versions.validate(
            self.base_gguf, staged / versions.ADAPTER_GGUF, [*batch[0].prompt_ids[-8:], *batch[0].reply_ids[:8]],
            heldout_ids=[s.turn_id for s in heldout], before=before, after=after, max_drop=cfg.max_logprob_drop,
            guard=guard,
        )  # fmt: skip
        status = "ready" if validation["passed"] else "rejected"
        checks = self.memory_check(learner, batch, step) if validation["passed"] else []
        if checks:
            validation["memory"] = [c.record() for c in checks]
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
        samples = [
            {
                "turn_id": s.turn_id,
                "step_id": s.step_id,
                "reward": s.reward,
                "hint": s.hint,
                "has_teacher": s.has_hint,
                "memory": s.memory,
            }
            for s in batch
        ]
        metadata = {k: v for k, v in record.items() if k not in ("base_name", "base_sha256")}
        metadata |= {"base": base, "lora": lora, "config": dataclasses.asdict(cfg), "samples": samples}
        versions.write_metadata(staged, metadata)
        path = versions.publish(staged, self.adapters_dir, number)
        version = versions.record_version(self.store, path=path, samples=batch, **record)
        if not version.ready:
            learner.restore(snapshot)
        for line in consolidate.apply_checks(self.store, checks):
            self.progress("validating", step, f"v{number}: {line}")
        held = {k: v for k, v in validation["heldout"].items() if isinstance(v, float)}
        if "ppl_ratio" in guard:
            held["guard_ppl_ratio"] = guard["ppl_ratio"]
        message = f"v{number} {status}" + (f": {version.note}" if version.note else "")
        self.progress("validating", step, message, {"version": float(number), "ready": float(version.ready)} | held)
        return version

    def memory_check(self, learner: Learner, batch: list[Sample], step: int) -> list[consolidate.ItemCheck]:
        """Which kept preference items the new weights carry (measured, nothing changed yet)."""
        self.progress("validating", step, "checking which preference items the adapter carries")
        return consolidate.check_items(
            self.store, learner, self.base_sha256, trained_now={s.turn_id for s in batch},
            probe=self._form_probe(), word_limit=self.config.item_word_limit,
        )  # fmt: skip

    def _form_probe(self) -> FormProbe | None:
        """The behaviour test's prompts; None (the log-prob criterion alone) while no item is kept."""
        if self.form_probe is None and list_preferences(self.store, statuses=("active", "learned")):
            self.form_probe = load_form_probe(self.base_gguf, system_prompt=self.system_prompt)
        return self.form_probe

    def guarded_step(
        self, learner: Learner, batch: list[Sample], ref, teacher, step: int, snapshot,
        distill: list[Extra] = (), anchor: list[Extra] = (), student: list[Extra] = (),
    ):  # fmt: skip
        """One learner step that keeps the guard texts' perplexity within ``train.max_ppl_ratio``, if it can.

        A backtracking line search on general ability: where the step at ``train.lr`` costs more than
        allowed, the same step is taken again from the weights before it at each smaller scale of
        ``GUARD_LR_SCALES``. Returns the kept step's metrics and the guard record (``lr_scale``, the
        ratio of every try); a step that fails at every scale is left in place for validation to reject.
        A retry restores the snapshot's weights and, with ``train.keep_optimizer``, its AdamW moments
        (else a fresh AdamW); every try uses the same lever samples (distillation, anchor, student).
        """
        cfg, n = self.config, self.n_steps
        tried: list[float] = []
        for k, scale in enumerate(GUARD_LR_SCALES):
            if k:
                learner.restore(snapshot)
            learner.set_lr(cfg.lr * scale)
            self.phase = "step"  # its first progress line comes after the first micro-batch
            metrics = learner.step(
                batch, ref, teacher, stop=self.stopped, distill=distill, anchor=anchor, student=student,
                on_micro=lambda i, m: self.progress("step", step, f"step {step}/{n}: micro-batch {i}/{m}"),
            )  # fmt: skip
            metrics["lr_scale"] = scale
            if self.guard is None:
                return metrics, {"skipped": self.guard_skipped}
            guard = guard_check(learner, self.guard, cfg.max_ppl_ratio)
            tried.append(guard["ppl_ratio"])
            if guard["passed"] or k + 1 == len(GUARD_LR_SCALES):
                break
            self.progress(
                "step", step,
                f"step {step}/{n}: the guard texts' perplexity rose to {guard['ppl_ratio']:.3f}x the base's "
                f"(allowed {cfg.max_ppl_ratio:g}x); again at {GUARD_LR_SCALES[k + 1]:g}x the learning rate",
            )  # fmt: skip
        return metrics, guard | {"lr_scale": scale, "tried": tried}


def load_learner(
    base_gguf: Path, config: TrainConfig, parent: versions.AdapterVersion | None, *, on_status=None
) -> Learner:
    """Load the base weights and wrap them in a :class:`Learner`: a fresh LoRA, or ``parent`` continued."""
    from clawdesk.learn.base_model import load_base

    model, info = load_base(
        base_gguf, hf_checkpoint=config.hf_checkpoint, device=config.device, load_in_4bit=config.load_in_4bit,
        base_dtype=config.base_dtype, on_status=on_status,
    )  # fmt: skip
    if parent is not None and on_status is not None:
        on_status(f"continuing from v{parent.version}")
    return Learner(model, info, config, parent_dir=parent.peft_dir if parent else None)


# -- the separate process --------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m clawdesk.learn.trainer``: one protocol line on stdout per progress, exit 0 on success.

    The lines are :mod:`clawdesk.learn.protocol`'s: first :class:`TrainerStarted`, then a
    :class:`TrainProgress` per report; a :class:`ClawDeskError` ends the run with a
    :class:`TrainerFailed` line and exit code 1. SIGTERM stops cleanly at the next micro-batch (the
    step in progress is dropped).
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

    def emit(message: TrainerMessage) -> None:
        out.write(encode(message))
        out.flush()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # finish cleanly at the next micro-batch
    # First line: whether the app may stop this process while it serves a reply (clawdesk.learn.pause).
    emit(TrainerStarted(continue_if_parent_dies()))
    try:
        config, system_prompt = _run_config(args.config_home, args.batch_size)
        _limit_threads()
        train(args.db, args.adapters, args.base, args.base_name, args.base_sha, config,
              steps=args.steps, on_progress=emit, stop=stop, system_prompt=system_prompt)  # fmt: skip
    except ClawDeskError as err:
        emit(TrainerFailed(str(err), type(err).__name__))
        return 1
    finally:
        sys.stdout = out
    return 0


def _run_config(config_home: Path | None, batch_size: int | None) -> tuple[TrainConfig, str]:
    """The ``[train]`` settings and the chat's system prompt (defaults without a config home)."""
    from clawdesk.config import ChatConfig, load_config

    full = load_config(config_home.expanduser().resolve()) if config_home else None
    config = full.train if full else TrainConfig()
    system_prompt = (full.chat if full else ChatConfig()).system_prompt
    if batch_size is not None:
        try:
            config = dataclasses.replace(config, batch_size=batch_size)
        except ValueError as exc:
            raise ConfigError(f"--batch-size {batch_size}: {exc}") from exc
    return config, system_prompt


def _limit_threads() -> None:
    # Half the cores, like the chat engine's default: torch and llama.cpp threads fighting over the
    # same cores slow both down far more than splitting them (FIELD-NOTES).
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))


if __name__ == "__main__":
    sys.exit(main())
