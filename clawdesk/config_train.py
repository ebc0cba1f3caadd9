"""The ``[train]`` section of ``config.toml``: the on-device learner's settings, validated like the rest.

Split from :mod:`clawdesk.config` for size; :class:`~clawdesk.config.Config` holds a
:class:`TrainConfig` and :func:`~clawdesk.config.load_config` builds it like every section. The
defaults that shape learning come from the measured tables in docs/learning.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


STEP_REWARDS = ("stepwise", "outcome")
ADVANTAGES = ("reward", "baseline", "own_baseline")
TEACHERS = ("base", "policy")
KEEP_SATISFIED = ("off", "all", "raised", "end")
BASE_DTYPES = ("auto", "float32", "bfloat16")
TRAIN_DEVICE = re.compile(r"auto|cpu|cuda(:[0-9]+)?")


@dataclass(frozen=True)
class TrainConfig:
    """The on-device learner (LoRA on the served model's base weights)."""

    # batch_size, epochs and lr come from the ablation in docs/learning.md (8 / 2 / 5e-4 reached a
    # held-out score of 0.75 after 16 interactions where 16 / 1 / 1e-4 had 0.12).
    batch_size: int = 8
    epochs: int = 2  # optimizer passes over each batch (PPO epochs; old log-probs frozen at the first)
    lr: float = 5e-4
    lora_r: int = 16
    lora_alpha: int = 32
    w_binary: float = 1.0
    w_opd: float = 1.0
    eps: float = 0.2
    eps_high: float = 0.28
    beta_kl: float = 0.02
    token_budget: int = 2048  # tokens per micro-batch
    max_logprob_drop: float = 1.0  # validation: held-out mean log-prob may fall by at most this
    # Validation: perplexity of the guard text set (assets/guard-set.jsonl) with the adapter over the
    # base's may be at most this; 0 turns the check off. 1.05 is the eval's forgetting goal; see
    # docs/learning.md for what it does to learning.
    max_ppl_ratio: float = 1.05
    hf_checkpoint: str = ""  # optional HF checkpoint dir to train on instead of the served GGUF
    # The reward of a tool step (a non-final model call of the agent loop): "stepwise" = the turn's
    # outcome o plus the mean of the step's judge votes (OpenClaw-RL's step-wise reward), "outcome" =
    # o alone (the ablation). A turn's final answer is always rewarded with o.
    step_reward: str = "stepwise"
    # Where the learner trains: "auto" = the first CUDA GPU when torch sees one, else the CPU.
    device: str = "auto"
    # Decoder linears in 4-bit NF4 (QLoRA): "auto" = on CUDA only; true also works on a CPU (slower).
    load_in_4bit: str | bool = "auto"
    # Weight dtype of the base on a CPU (and of what 4-bit leaves unquantized): "auto" = fp32 while the
    # fp32 weights fit in half the available RAM (exact, and the small demo model always does), else bf16.
    base_dtype: str = "auto"
    # The learning levers (docs/learning.md, "Levers"). Each default is today's behaviour: no lever has yet
    # a measured table that favours it on every persona (the defaults that shape learning come from one).
    # The binary term's advantage: "reward" = r (today), "baseline" = r − the mean r of the batch's
    # judged samples (reward ≠ 0; the others keep 0), so an all-+1 or all-−1 batch trains nothing
    # through it (objective.centered_reward); "own_baseline" = the same over the samples served
    # without preference items only (one served with them is what the student, without them, is to learn).
    advantage: str = "reward"
    # Whose log-probs, with the hint and the preference items in context, the OPD teacher gives:
    # "base" (the frozen base, as OpenClaw-RL does) or "policy" (the adapter as it was before the step,
    # so a step learns what the items add to the adapter, and the items' effect on it is the fixed point).
    teacher: str = "base"
    # Context distillation: replies sampled per hinted sample from the teacher (the base with the hint
    # in context), learned without the hint (objective.distill_loss); 0 = off.
    distill_samples: int = 0
    w_distill: float = 1.0  # weight of the distillation term against the combined loss
    distill_max_weight: float = 4.0  # clip of its per-token importance weight π_teacher / π_served
    distill_max_tokens: int = 128  # length cap of a sampled teacher reply (and of a student_samples reply)
    distill_temperature: float = 0.7  # the teacher's sampling temperature (the chat's default)
    # On-policy distillation on the adapter's own replies: replies sampled per teacher-bearing sample
    # (a hint, or preference items in its served prompt) from the adapter in the student's prompt
    # (without the items and the hint), at temperature 1, each token's advantage log π_teacher − log
    # π_old, PPO-clipped (extras.student_samples); 0 = off.
    student_samples: int = 0
    w_student: float = 1.0  # weight of that term against the combined loss
    # 0: that term is the sampled-token advantage above; K > 0: the forward KL from the teacher's K
    # likeliest next tokens (plus the rest as one bucket) at every position of those replies
    # (objective.topk_kl), so a stop the teacher wants is learned where the adapter did not stop.
    student_topk: int = 0
    # Keep AdamW's moments across a guard retry (from before the failed try) and across trainer runs
    # (saved as optimizer.safetensors beside each version's PEFT files; never exported).
    keep_optimizer: bool = False
    # Weight of KL(base ‖ policy) on the base's own replies to general prompts (objective.anchor_kl;
    # assets/anchor-prompts.jsonl, replies sampled once per run); 0 = off.
    anchor_coef: float = 0.0
    anchor_max_tokens: int = 96  # length cap of a base reply the anchor samples
    # n >= 2: no OPD advantage for reply tokens inside an n-token run that only the teacher's prompt
    # has (the hint's words written back: learn/copy_mask.py); 0 = off.
    opd_copy_ngram: int = 0
    # On a sample with a positive reward the OPD advantage only adds (max(teacher − old, 0)), so a teacher
    # less sure of a satisfied reply than the student is does not pull the student back toward it:
    # "off", "all" (every token), "raised" (the tokens the teacher's context made likelier than the
    # base finds them) or "end" (only the end-of-turn token that closed the reply: the stop).
    # objective.combined_loss; measured on `brief` and `no-lists`: docs/learning.md, stops 47-48.
    opd_keep_satisfied: str = "off"
    # The learned check's behaviour test on a length item that names its limit ("at most 40 words"): a reply
    # without the item within that limit agrees, one past it only if the reply with the item went as far
    # (store/pref_topics.length_bound; learn/consolidate.py). false: the replies' lengths must be close.
    item_word_limit: bool = False

    def __post_init__(self) -> None:
        _check(
            self.advantage in ADVANTAGES,
            f'train.advantage must be "reward", "baseline" or "own_baseline", got {self.advantage!r}',
        )
        _check(self.teacher in TEACHERS, f'train.teacher must be "base" or "policy", got {self.teacher!r}')
        _check(
            self.opd_keep_satisfied in KEEP_SATISFIED,
            f'train.opd_keep_satisfied must be "off", "all", "raised" or "end", got {self.opd_keep_satisfied!r}',
        )
        _check(0 <= self.distill_samples <= 8, f"train.distill_samples must be in 0..8, got {self.distill_samples}")
        _check(0 <= self.student_samples <= 8, f"train.student_samples must be in 0..8, got {self.student_samples}")
        _check(self.w_distill >= 0, f"train.w_distill must be >= 0, got {self.w_distill}")
        _check(self.w_student >= 0, f"train.w_student must be >= 0, got {self.w_student}")
        _check(0 <= self.student_topk <= 256, f"train.student_topk must be in 0..256, got {self.student_topk}")
        _check(self.distill_max_weight >= 1, f"train.distill_max_weight must be >= 1, got {self.distill_max_weight}")
        for key in ("distill_max_tokens", "anchor_max_tokens"):
            _check(1 <= getattr(self, key) <= 4096, f"train.{key} must be in 1..4096, got {getattr(self, key)}")
        _check(
            0 < self.distill_temperature <= 2,
            f"train.distill_temperature must be in (0, 2], got {self.distill_temperature}",
        )
        _check(self.anchor_coef >= 0, f"train.anchor_coef must be >= 0, got {self.anchor_coef}")
        _check(
            self.opd_copy_ngram == 0 or 2 <= self.opd_copy_ngram <= 16,
            f"train.opd_copy_ngram must be 0 (off) or in 2..16, got {self.opd_copy_ngram}",
        )
        _check(
            isinstance(self.device, str) and TRAIN_DEVICE.fullmatch(self.device) is not None,
            f'train.device must be "auto", "cpu", "cuda" or "cuda:N" (N = the GPU\'s index), got {self.device!r}',
        )
        _check(
            isinstance(self.load_in_4bit, bool) or self.load_in_4bit == "auto",
            f'train.load_in_4bit must be true, false or "auto" (4-bit on CUDA, and on a CPU when a bf16 '
            f"step would not fit in 8 GB), got {self.load_in_4bit!r}",
        )
        _check(
            self.base_dtype in BASE_DTYPES,
            f'train.base_dtype must be "auto", "float32" or "bfloat16", got {self.base_dtype!r}',
        )
        _check(
            self.step_reward in STEP_REWARDS,
            f'train.step_reward must be "stepwise" or "outcome", got {self.step_reward!r}',
        )
        _check(1 <= self.batch_size <= 1024, f"train.batch_size must be in 1..1024, got {self.batch_size}")
        _check(1 <= self.epochs <= 16, f"train.epochs must be in 1..16, got {self.epochs}")
        _check(0 < self.lr < 1, f"train.lr must be in (0, 1), got {self.lr}")
        _check(self.lora_r >= 1 and self.lora_alpha >= 1, "train.lora_r and train.lora_alpha must be >= 1")
        _check(0 < self.eps < 1 and 0 < self.eps_high < 1, "train.eps and train.eps_high must be in (0, 1)")
        _check(self.beta_kl >= 0, "train.beta_kl must be >= 0")
        _check(self.token_budget >= 64, "train.token_budget must be >= 64")
        _check(self.max_logprob_drop > 0, "train.max_logprob_drop must be > 0")
        _check(
            self.max_ppl_ratio == 0 or self.max_ppl_ratio >= 1,
            f"train.max_ppl_ratio must be 0 (no check) or >= 1, got {self.max_ppl_ratio}",
        )


# What [tools.policy] may name and say, as data: config imports no stage. They equal
