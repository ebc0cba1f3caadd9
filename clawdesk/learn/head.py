"""The log-prob head: log π(token | position) from final hidden states, computed in fp32.

A bf16 (or fp16) base model's ``lm_head`` returns bf16 logits: with logits of magnitude ~20 their
spacing is 0.125, so a reply token's log-prob is off by up to ~0.1 nat, and that noise lands in the
OPD advantage (teacher − old) and the KL term. Here only the positions whose log-prob the learner
uses (the reply tokens) go through the head, as fp32 matrix products over vocabulary chunks: the
weight is never copied whole to fp32 (1.5 GB for Qwen3-4B) and no ``(B, T, V)`` logits tensor exists.

The backward pass is written out (:func:`_head_function`): d log p / d h = W[target] − Σ_v p_v W_v,
so the chunks' probabilities are kept from the forward when they are small and recomputed otherwise.
The head weight must be frozen (LoRA never targets it); the gradient flows to the hidden states only.
"""

from __future__ import annotations

import functools
from typing import Any

from clawdesk.errors import TrainError

CHUNK_BYTES = 1 << 28  # one vocabulary chunk's fp32 weight rows + logits stay under 256 MiB
SAVE_PROBS_MAX = 1 << 26  # keep the forward's probabilities for backward up to 64 Mi values (256 MiB fp32)


def head_logprobs(hidden, head, targets, *, chunk_rows: int | None = None, save_probs_max: int = SAVE_PROBS_MAX):
    """``log softmax(head(hidden))[targets]`` in fp32: ``hidden`` ``(N, H)``, ``targets`` ``(N,)`` → ``(N,)``.

    ``head`` is the model's output layer (an ``nn.Linear``, possibly tied to the embedding).
    ``chunk_rows`` overrides how many vocabulary rows one chunk takes (tests use it to exercise chunking).
    """
    weight, bias = head.weight, getattr(head, "bias", None)
    if weight.requires_grad or (bias is not None and bias.requires_grad):
        raise TrainError("the fp32 log-prob head needs a frozen output layer; the LoRA must not train lm_head.")
    if chunk_rows is None:
        chunk_rows = max(1, CHUNK_BYTES // (4 * (hidden.shape[0] + hidden.shape[1])))
    return _head_function().apply(hidden, weight, bias, targets, chunk_rows, save_probs_max)


def _chunks(weight, bias, rows: int):
    """``(start, fp32 weight rows (c, H), fp32 bias (c,) or None)`` over the vocabulary."""
    for start in range(0, weight.shape[0], rows):
        w = weight[start : start + rows].float()
        yield start, w, (bias[start : start + rows].float() if bias is not None else None)


def _logits(h32, w, b):
    z = h32 @ w.T  # (N, c)
    return z + b if b is not None else z


@functools.cache  # built on first use: importing this module imports no torch
def _head_function():
    import torch

    class HeadLogProb(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, hidden, weight, bias, targets, rows: int, save_probs_max: int):
            h32 = hidden.float()  # (N, H)
            n = h32.shape[0]
            lse = torch.full((n,), float("-inf"), dtype=torch.float32, device=h32.device)  # (N,)
            picked = torch.zeros((n,), dtype=torch.float32, device=h32.device)  # (N,) the targets' logits
            keep = ctx.needs_input_grad[0] and n * weight.shape[0] <= save_probs_max
            kept: list[Any] = []
            for start, w, b in _chunks(weight, bias, rows):
                z = _logits(h32, w, b)  # (N, c)
                lse = torch.logaddexp(lse, z.logsumexp(-1))
                inside = (targets >= start) & (targets < start + w.shape[0])  # (N,)
                local = (targets - start).clamp(0, w.shape[0] - 1)  # (N,)
                picked = torch.where(inside, z.gather(-1, local[:, None]).squeeze(-1), picked)
                if keep:
                    kept.append(z)
            if keep:  # logits → probabilities once lse is known; freed with the graph
                kept = [torch.exp(z - lse[:, None]) for z in kept]  # (N, c) each
            ctx.rows, ctx.kept = rows, kept
            ctx.save_for_backward(hidden, weight, bias, targets, lse)
            return picked - lse

        @staticmethod
        def backward(ctx: Any, grad):  # grad (N,)
            hidden, weight, bias, targets, lse = ctx.saved_tensors
            g = grad.float()
            h32 = hidden.float()
            # d logp_n / d h_n = W[target_n] − Σ_v p_nv W_v
            out = g[:, None] * weight[targets].float()  # (N, H)
            for k, (_, w, b) in enumerate(_chunks(weight, bias, ctx.rows)):
                p = ctx.kept[k] if ctx.kept else torch.exp(_logits(h32, w, b) - lse[:, None])  # (N, c)
                out -= (p * g[:, None]) @ w
            ctx.kept = []
            return out.to(hidden.dtype), None, None, None, None, None

    return HeadLogProb
