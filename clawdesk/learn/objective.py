"""The training objective: Binary RL plus on-policy distillation, PPO-clipped, with a k3 KL term.

This module owns the loss and nothing else: it sees per-token log-probabilities of the reply
tokens and returns a scalar. Building samples, computing the log-probs and stepping the optimizer
belong to the trainer. Besides :func:`combined_loss` it holds the pure terms of the learning
levers (docs/learning.md, "Levers"): :func:`centered_reward` (a batch baseline),
:func:`distill_loss` (context distillation on replies sampled from the hint teacher),
:func:`anchor_kl` (KL to the base on the base's own replies to general prompts) and :func:`topk_kl`
(the teacher's whole next-token distribution, not just the sampled token, on the adapter's own replies).

For sample ``b`` and reply token ``t`` (all tensors ``(B, T)`` except ``reward``/``has_hint``)::

    D[b,t]   = teacher_logp[b,t] − old_logp[b,t]            (max(D, 0) on satisfied samples, per keep_satisfied)
    A[b,t]   = w_binary·reward[b] + w_opd·has_hint[b]·D[b,t]
    ρ[b,t]   = exp(logp[b,t] − old_logp[b,t])
    pg[b,t]  = −min(ρ·A, clip(ρ, 1 − eps, 1 + eps_high)·A)
    kl[b,t]  = exp(ref_logp − logp) − (ref_logp − logp) − 1          (k3 estimator, ≥ 0)
    ℓ[b,t]   = pg[b,t] + beta_kl·kl[b,t]
    loss     = mean over samples with ≥ 1 reply token of  Σ_t mask·ℓ / Σ_t mask

Only ``logp`` carries gradient; the other log-probs, the reward and the hint flag are constants.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from clawdesk.config import KEEP_SATISFIED
from clawdesk.errors import TrainError

if TYPE_CHECKING:
    import torch


def combined_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    teacher_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    reward: torch.Tensor,
    has_hint: torch.Tensor,
    mask: torch.Tensor,
    *,
    w_binary: float = 1.0,
    w_opd: float = 1.0,
    eps: float = 0.2,
    eps_high: float = 0.28,
    beta_kl: float = 0.02,
    keep_satisfied: str = "off",
    satisfied: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Combined Binary-RL + OPD clipped policy loss with a k3 KL penalty to the reference.

    See the module docstring for the formula. Arguments:

    - ``logp``: current policy log-probs of the reply tokens, ``(B, T)``; the only input with grad.
    - ``old_logp``: log-probs of the policy that the samples are treated as drawn from, ``(B, T)``.
    - ``teacher_logp``: log-probs under the hint-enhanced context, ``(B, T)``; ignored where
      ``has_hint`` is false.
    - ``ref_logp``: log-probs of the frozen reference (the base model), ``(B, T)``.
    - ``reward``: the judge's ``r_final`` per sample, ``(B,)`` float.
    - ``has_hint``: whether the sample has an accepted hint (OPD signal), ``(B,)`` bool.
    - ``mask``: which positions are reply tokens, ``(B, T)`` bool or float. A float mask is used as
      non-negative per-token weights (0/1 is the usual case).
    - ``keep_satisfied``: ``"off"`` (the formula above); ``"all"``: on a sample with ``reward`` > 0 the
      OPD term only adds (``max(D, 0)``); ``"raised"``: the same only at the tokens the teacher's
      context made likelier than the base found them (``teacher_logp > ref_logp``: what the hint or
      the preference items are about). A teacher less sure of a reply the user was satisfied with
      than the student already is otherwise pulls the student back: the base teacher (with a
      preference item) stops a short reply with lower probability than a student that learned to,
      and on `brief` its advantage at the end token of satisfied replies was −0.2 to −3 nats once the
      first version had learned to stop; the adapter's own replies grew back (docs/learning.md, "A
      teacher that unteaches"). ``"raised"`` leaves the pull on the other tokens, where it holds the
      student's sharpening of its own replies in check. ``"end"``: only at each satisfied sample's last
      reply token, which is the stop when the caller counts as satisfied only the replies that ended
      with the end-of-turn token (the learner does). Measured there, none is a default: ``"all"``
      carried `brief` and cost `no-lists` and the guard's budget, ``"raised"`` did not hold, ``"end"``
      kept both personas' weights and cost a stacked scenario the score the person sees.
    - ``satisfied``: which samples count as satisfied for ``keep_satisfied``, ``(B,)`` bool; default
      ``reward > 0``. The learner passes the judge's reward sign, since with ``train.advantage =
      "baseline"`` the ``reward`` given here is centred and an all-+1 batch has none above 0.

    Values at masked-out positions never reach the loss or the gradient, even if they are
    ``inf`` or ``nan`` (padding often is). A sample with no reply tokens contributes nothing; if
    no sample has any, the loss is a zero still connected to ``logp`` so ``backward()`` works.

    Returns ``(loss, metrics)``; ``loss`` is a 0-dim tensor and metrics are python floats:
    ``loss``; token-weighted masked means over all reply tokens ``pg_loss``, ``kl``, ``adv_mean``,
    ``ratio_mean`` and ``clip_frac`` (fraction of tokens where the min picked the clipped term
    and it differs from the unclipped one); ``opd_adv_mean`` (mean of the OPD term
    ``w_opd·(teacher − old)`` over reply tokens of hinted samples, 0 if none); ``reward_mean``
    (over samples with reply tokens, 0 if none); counts ``n_tokens`` (mask sum), ``n_samples``
    and ``n_hinted`` (samples with reply tokens, and those of them with a hint).
    """
    import torch

    _check(logp, old_logp, teacher_logp, ref_logp, reward, has_hint, mask, eps=eps, eps_high=eps_high)

    # Compute in at least fp32: exp() of bf16 log-ratios is too coarse to see clipping boundaries.
    dtype = torch.promote_types(logp.dtype, torch.float32)
    keep = mask != 0  # (B, T) bool
    weight = mask.to(dtype) if mask.is_floating_point() else keep.to(dtype)  # (B, T)
    zero = torch.zeros((), dtype=dtype, device=logp.device)

    # where() (not multiplication by the mask) so inf/nan at padding cannot leak into the loss
    # or, through 0·inf, into the gradient.
    lp = torch.where(keep, logp.to(dtype), zero)  # (B, T) grad flows at kept positions only
    old = torch.where(keep, old_logp.detach().to(dtype), zero)  # (B, T)
    teacher = torch.where(keep, teacher_logp.detach().to(dtype), zero)  # (B, T)
    ref = torch.where(keep, ref_logp.detach().to(dtype), zero)  # (B, T)
    r = reward.detach().to(dtype)[:, None]  # (B, 1)
    hinted = has_hint.detach() != 0  # (B,) bool
    h = hinted.to(dtype)[:, None]  # (B, 1)

    gap = teacher - old  # (B, T)
    if keep_satisfied not in KEEP_SATISFIED:
        raise TrainError(f"combined_loss: keep_satisfied must be one of {KEEP_SATISFIED}, got {keep_satisfied!r}")
    if keep_satisfied != "off":  # the teacher may add to a satisfied reply, not take from it
        sat = (r > 0) if satisfied is None else (satisfied.detach() != 0)[:, None]  # (B, 1)
        if keep_satisfied == "raised":
            floor = sat & (teacher > ref)  # (B, T)
        elif keep_satisfied == "end":
            pos = torch.arange(keep.shape[-1], device=keep.device)  # (T,)
            last = torch.where(keep, pos, -1).amax(dim=-1, keepdim=True)  # (B, 1) the last reply token
            floor = sat & (pos == last)  # (B, T)
        else:
            floor = sat.expand_as(gap)  # (B, T)
        gap = torch.where(floor, gap.clamp_min(0.0), gap)  # (B, T)
    opd = w_opd * h * gap  # (B, T) on-policy distillation advantage
    adv = w_binary * r + opd  # (B, T)

    ratio = torch.exp(lp - old)  # (B, T)
    unclipped = ratio * adv  # (B, T)
    clipped = ratio.clamp(1.0 - eps, 1.0 + eps_high) * adv  # (B, T)
    pg = -torch.minimum(unclipped, clipped)  # (B, T)

    delta = ref - lp  # (B, T)
    kl = torch.exp(delta) - delta - 1.0  # (B, T) k3 estimator of KL(policy ‖ ref)

    per_token = pg + beta_kl * kl  # (B, T)

    tokens = weight.sum(dim=-1)  # (B,)
    present = tokens > 0  # (B,) samples that contribute
    denom = torch.where(present, tokens, torch.ones_like(tokens))  # (B,) an empty sample must not divide by 0
    sample_loss = (per_token * weight).sum(dim=-1) / denom  # (B,) masked token-mean per sample
    n_samples = present.sum()  # ()
    loss = (sample_loss * present.to(dtype)).sum() / n_samples.clamp_min(1).to(dtype)  # ()

    with torch.no_grad():
        clip_active = (clipped < unclipped).to(dtype)  # (B, T) the min picked the clipped term
        hint_weight = weight * h  # (B, T)
        n_tok = float(weight.sum())
        metrics = {
            "loss": float(loss.detach()),
            "pg_loss": _masked_mean(pg, weight),
            "kl": _masked_mean(kl, weight),
            "adv_mean": _masked_mean(adv, weight),
            "ratio_mean": _masked_mean(ratio, weight),
            "clip_frac": _masked_mean(clip_active, weight),
            "opd_adv_mean": _masked_mean(opd, hint_weight),
            "reward_mean": float(r[present].mean()) if bool(present.any()) else 0.0,
            "n_tokens": n_tok,
            "n_samples": float(n_samples),
            "n_hinted": float((present & hinted).sum()),
        }
    return loss, metrics


def centered_reward(reward: torch.Tensor, centre: torch.Tensor | None = None) -> torch.Tensor:
    """The batch baseline over the judged samples, ``(B,)`` → ``(B,)``::

        J      = {b : reward[b] ≠ 0 and centre[b]}           (samples the judge scored; centre: all by default)
        A_b    = reward[b] − mean_{j ∈ J} reward[j]          for b ∈ J
        A_b    = reward[b]                                   for b ∉ J

    With it a batch whose rewards are all equal (all +1 once a preference is met, all −1 before the
    policy ever does it) gives no binary-RL gradient at all: training toward its own samples (all
    +1) only sharpens the policy, and pushing every sample down (all −1) only moves mass away
    without saying where to. What is left to learn from such a batch is the hint's signal (OPD,
    context distillation). A sample with reward 0 is in the batch for its hint or its preference
    items alone (the judge said "unclear", or the ``opd`` method zeroed it): centring it would push
    it down (or up) by the others' mean, a verdict nobody gave, so it stays at 0 and out of the mean.

    ``centre`` (``(B,)`` bool) picks the samples the baseline applies to; the others keep their reward
    and stay out of the mean. ``advantage = "own_baseline"`` passes the samples served *without*
    preference items: a +1 reply served with items is not the student's own sample (the student
    learns without them), so training toward it is consolidation, not sharpening. An empty batch
    stays empty.
    """
    r = reward.detach()  # (B,)
    judged = r != 0  # (B,)
    if centre is not None:
        judged = judged & centre  # (B,)
    out = r.clone()  # (B,)
    if bool(judged.any()):  # else nothing to centre
        out[judged] = r[judged] - r[judged].mean()
    return out  # (B,)


def distill_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    teacher_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps: float = 0.2,
    eps_high: float = 0.28,
    max_weight: float = 4.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Context distillation: the student without the hint learns replies sampled from the teacher with it.

    The replies ``y`` were sampled from the teacher π_T(·|s + hint) (the base with the hint in the
    user message); ``logp`` is the student π_θ(y_t|s, y_<t) *without* the hint, ``old_logp`` the
    same under the served policy (frozen at the step's first pass), ``teacher_logp`` π_T(y_t|s+hint,
    y_<t). All ``(B, T)``; only ``logp`` carries gradient::

        w[b,t]  = min(exp(teacher_logp − old_logp), max_weight)        clipped importance weight
        ρ[b,t]  = exp(logp − old_logp)
        ℓ[b,t]  = −min(ρ·w, clip(ρ, 1 − eps, 1 + eps_high)·w)
        loss    = mean over samples with ≥ 1 token of  Σ_t mask·ℓ / Σ_t mask

    At ρ = 1 the gradient is −w·∇logp: supervised learning on the teacher's tokens (forward KL
    from the teacher, as in "Learning by Distilling Context"), each token weighted by how much more
    the teacher wants it than the served policy does. That is what reaches a reply the policy never
    samples on its own: the token the hint makes likely and the served policy does not gets the
    largest weight (clipped at ``max_weight``, which bounds the variance); a token both agree on
    gets weight 1. The PPO clip on ρ stops a token's push once the student is ``1 + eps_high``
    times as likely to write it as the served policy was, so one batch moves the policy a bounded
    amount over its epochs. Masked-out positions never reach the loss or the gradient.

    Returns ``(loss, metrics)``: ``loss``, ``weight_mean`` (masked mean of w), ``weight_clip_frac``
    (tokens whose w hit ``max_weight``), ``clip_frac`` (tokens where the PPO clip acted),
    ``n_tokens``, ``n_samples``.
    """
    import torch

    if logp.dim() != 2:
        raise TrainError(f"distill_loss: logp must be (B, T), got shape {tuple(logp.shape)}.")
    for name, t in (("old_logp", old_logp), ("teacher_logp", teacher_logp), ("mask", mask)):
        if tuple(t.shape) != tuple(logp.shape):
            raise TrainError(f"distill_loss: {name} has shape {tuple(t.shape)} but logp is {tuple(logp.shape)}.")
    if not max_weight >= 1.0:
        raise TrainError(f"distill_loss: max_weight must be >= 1, got {max_weight}.")
    dtype = torch.promote_types(logp.dtype, torch.float32)
    keep = mask != 0  # (B, T)
    weight = mask.to(dtype) if mask.is_floating_point() else keep.to(dtype)  # (B, T)
    zero = torch.zeros((), dtype=dtype, device=logp.device)
    lp = torch.where(keep, logp.to(dtype), zero)  # (B, T)
    old = torch.where(keep, old_logp.detach().to(dtype), zero)  # (B, T)
    teacher = torch.where(keep, teacher_logp.detach().to(dtype), zero)  # (B, T)

    w = torch.exp(teacher - old).clamp(max=max_weight)  # (B, T) clipped importance weight
    ratio = torch.exp(lp - old)  # (B, T)
    unclipped = ratio * w  # (B, T)
    clipped = ratio.clamp(1.0 - eps, 1.0 + eps_high) * w  # (B, T)
    per_token = -torch.minimum(unclipped, clipped)  # (B, T)
    loss, n_samples = _sample_mean(per_token, weight)  # ()

    with torch.no_grad():
        metrics = {
            "loss": float(loss.detach()),
            "weight_mean": _masked_mean(w, weight),
            "weight_clip_frac": _masked_mean((w >= max_weight).to(dtype), weight),
            "clip_frac": _masked_mean((clipped < unclipped).to(dtype), weight),
            "n_tokens": float(weight.sum()),
            "n_samples": float(n_samples),
        }
    return loss, metrics


def anchor_kl(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """The general-ability anchor: KL(base ‖ policy) on replies the base sampled itself, k3 estimate.

    ``logp`` (policy, with grad) and ``ref_logp`` (the base) are the log-probs of the base's own
    replies to general prompts, ``(B, T)``; ``mask`` marks the reply tokens::

        δ[b,t] = logp − ref_logp
        k[b,t] = exp(δ) − δ − 1                      (≥ 0; E_base[k] = KL(base ‖ policy) per token)
        loss   = mean over samples with ≥ 1 token of  Σ_t mask·k / Σ_t mask

    ``k`` and its gradient ``exp(δ) − 1`` are exactly 0 where the policy equals the base, so the
    anchor costs nothing until the adapter moves general text; then it pulls back like InstructGPT's
    pre-training term, but toward the base's own distribution instead of a corpus. Returns
    ``(loss, {"loss", "n_tokens"})``.
    """
    import torch

    if logp.dim() != 2 or tuple(ref_logp.shape) != tuple(logp.shape) or tuple(mask.shape) != tuple(logp.shape):
        raise TrainError(
            f"anchor_kl: logp, ref_logp and mask must share one (B, T) shape, got {tuple(logp.shape)}, "
            f"{tuple(ref_logp.shape)}, {tuple(mask.shape)}."
        )
    dtype = torch.promote_types(logp.dtype, torch.float32)
    keep = mask != 0  # (B, T)
    weight = mask.to(dtype) if mask.is_floating_point() else keep.to(dtype)  # (B, T)
    zero = torch.zeros((), dtype=dtype, device=logp.device)
    delta = torch.where(keep, logp.to(dtype) - ref_logp.detach().to(dtype), zero)  # (B, T)
    k3 = torch.exp(delta) - delta - 1.0  # (B, T)
    loss, _ = _sample_mean(k3, weight)  # ()
    return loss, {"loss": float(loss.detach()), "n_tokens": float(weight.sum())}


def topk_kl(
    logp_at: torch.Tensor, teacher_topk: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """Forward KL from the teacher's next-token distribution, on its top K tokens plus the rest, per position.

    At each reply position of a reply the adapter sampled itself, ``teacher_topk`` ``(B, T, K)`` holds
    the teacher's log-probs of its K likeliest next tokens and ``logp_at`` ``(B, T, K)`` the policy's
    log-probs of the same tokens (with gradient); ``mask`` ``(B, T)`` marks reply positions. The rest
    of the vocabulary is one bucket::

        p[k]    = exp(teacher_topk[k]),  r_T = 1 − Σ_k p[k],  r_π = 1 − Σ_k exp(logp_at[k])
        kl[b,t] = Σ_k p[k]·(teacher_topk[k] − logp_at[k]) + r_T·(log r_T − log r_π)
        loss    = mean over samples with ≥ 1 token of  Σ_t mask·kl / Σ_t mask

    ``kl`` ≥ 0, and it and its gradient are 0 where the policy gives those tokens the teacher's
    probabilities; with K = the vocabulary it is the exact KL(π_T ‖ π_θ) at each position. Unlike
    the sampled-token OPD advantage (which sees a stop decision only where the reply stopped), every
    position also teaches how likely the teacher finds each alternative there, the end of the reply
    among them: where a shorter reply would stop, the teacher's end-token probability is learned at
    every position of a longer one (generalized on-policy distillation, Agarwal et al. 2024). The
    buckets' probabilities are floored at 1e-8 so ``log`` stays finite. Returns ``(loss, {"loss",
    "kl", "n_tokens"})``.
    """
    import torch

    if logp_at.dim() != 3 or tuple(teacher_topk.shape) != tuple(logp_at.shape):
        raise TrainError(
            f"topk_kl: logp_at and teacher_topk must share one (B, T, K) shape, got {tuple(logp_at.shape)} "
            f"and {tuple(teacher_topk.shape)}."
        )
    if tuple(mask.shape) != tuple(logp_at.shape[:2]):
        raise TrainError(f"topk_kl: mask must be (B, T) = {tuple(logp_at.shape[:2])}, got {tuple(mask.shape)}.")
    dtype = torch.promote_types(logp_at.dtype, torch.float32)
    keep = mask != 0  # (B, T)
    weight = mask.to(dtype) if mask.is_floating_point() else keep.to(dtype)  # (B, T)
    zero = torch.zeros((), dtype=dtype, device=logp_at.device)
    lp = torch.where(keep[..., None], logp_at.to(dtype), zero)  # (B, T, K)
    tl = torch.where(keep[..., None], teacher_topk.detach().to(dtype), zero)  # (B, T, K)
    floor = 1e-8
    p = tl.exp()  # (B, T, K)
    rest_t = (1.0 - p.sum(-1)).clamp_min(floor)  # (B, T)
    rest_p = (1.0 - lp.exp().sum(-1)).clamp_min(floor)  # (B, T)
    kl = (p * (tl - lp)).sum(-1) + rest_t * (rest_t.log() - rest_p.log())  # (B, T)
    loss, _ = _sample_mean(kl, weight)  # ()
    with torch.no_grad():
        metrics = {"loss": float(loss.detach()), "kl": _masked_mean(kl, weight), "n_tokens": float(weight.sum())}
    return loss, metrics


def _sample_mean(per_token: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean over samples with any weight of each sample's weighted token mean; ``(loss (), n_samples ())``."""
    import torch

    tokens = weight.sum(dim=-1)  # (B,)
    present = tokens > 0  # (B,)
    denom = torch.where(present, tokens, torch.ones_like(tokens))  # (B,)
    sample = (per_token * weight).sum(dim=-1) / denom  # (B,)
    n = present.sum()  # ()
    return (sample * present.to(per_token.dtype)).sum() / n.clamp_min(1).to(per_token.dtype), n


def _masked_mean(x: torch.Tensor, weight: torch.Tensor) -> float:
    total = float(weight.sum())
    if total <= 0:
        return 0.0
    return float((x * weight).sum()) / total


def _check(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    teacher_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    reward: torch.Tensor,
    has_hint: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps: float,
    eps_high: float,
) -> None:
    if logp.dim() != 2:
        raise TrainError(f"combined_loss: logp must be (B, T) over reply tokens, got shape {tuple(logp.shape)}.")
    shape = tuple(logp.shape)
    for name, t in (("old_logp", old_logp), ("teacher_logp", teacher_logp), ("ref_logp", ref_logp), ("mask", mask)):
        if tuple(t.shape) != shape:
            raise TrainError(f"combined_loss: {name} has shape {tuple(t.shape)} but logp is {shape}; align them.")
    for name, t in (("reward", reward), ("has_hint", has_hint)):
        if tuple(t.shape) != shape[:1]:
            raise TrainError(f"combined_loss: {name} must be (B,) = {shape[:1]}, got {tuple(t.shape)}.")
    if not 0.0 <= eps < 1.0 or eps_high < 0.0:
        raise TrainError(f"combined_loss: need 0 <= eps < 1 and eps_high >= 0, got eps={eps}, eps_high={eps_high}.")
