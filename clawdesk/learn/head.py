"""The log-prob head: log π(token | position) from final hidden states, computed in fp32.

A bf16 (or fp16) base model's ``lm_head`` returns bf16 logits: with logits of magnitude ~20 their
spacing is 0.125, so a reply token's log-prob is off by up to ~0.1 nat, and that noise lands in the
OPD advantage (teacher − old) and the KL term. Here only the positions whose log-prob the learner
uses (the reply tokens) go through the head, as fp32 matrix products over vocabulary chunks: the
weight is never copied whole to fp32 (1.5 GB for Qwen3-4B) and no ``(B, T, V)`` logits tensor exists.

The backward pass is written out (:func:`_head_function`): d log p / d h = W[target] − Σ_v p_v W_v,
so the chunks' probabilities are kept from the forward when they are small and recomputed otherwise.
The head weight must be frozen (LoRA never targets it); the gradient flows to the hidden states only.
:func:`head_topk` gives the teacher's K likeliest tokens per position the same way, for the top-K
distillation of the adapter's own replies (``train.student_topk``).
"""

from __future__ import annotations

import functools
from typing import Any

from clawdesk.errors import TrainError

CHUNK_BYTES = 1 << 28  # one vocabulary chunk's fp32 weight rows + logits stay under 256 MiB
SAVE_PROBS_MAX = 1 << 26  # keep the forward's probabilities for backward up to 64 Mi values (256 MiB fp32)


def head_logprobs(hidden, head, targets, *, chunk_rows: int | None = None, save_probs_max: int = SAVE_PROBS_MAX):
    """``log softmax(head(hidden))[targets]`` in fp32: ``hidden`` ``(N, H)``, ``targets`` ``(N,)`` → ``(N,)``,
    or ``(N, K)`` → ``(N, K)`` (K tokens per position: the top-K distillation's teacher tokens).

    ``head`` is the model's output layer (an ``nn.Linear``, possibly tied to the embedding).
    ``chunk_rows`` overrides how many vocabulary rows one chunk takes (tests use it to exercise chunking).
    """
    weight, bias = _frozen(head)
    if chunk_rows is None:
        chunk_rows = _chunk_rows(hidden)
    many = targets.dim() == 2
    columns = targets if many else targets[:, None]  # (N, K)
    out = _head_function().apply(hidden, weight, bias, columns, chunk_rows, save_probs_max)
    return out if many else out[:, 0]


def head_topk(hidden, head, k: int, *, chunk_rows: int | None = None):
    """The ``k`` likeliest tokens per position and their fp32 log-probs, without gradient: ``hidden`` ``(N, H)``
    → ``(logp (N, k), ids (N, k))``, likeliest first. Chunked like :func:`head_logprobs` (no ``(N, V)`` tensor)."""
    import torch

    weight, bias = _frozen(head)
    rows = chunk_rows or _chunk_rows(hidden)
    with torch.no_grad():
        h32 = hidden.float()  # (N, H)
        n = h32.shape[0]
        lse = torch.full((n,), float("-inf"), dtype=torch.float32, device=h32.device)  # (N,)
        best = torch.full((n, 0), float("-inf"), dtype=torch.float32, device=h32.device)  # (N, ≤k) logits
        ids = torch.zeros((n, 0), dtype=torch.long, device=h32.device)  # (N, ≤k)
        for start, w, b in _chunks(weight, bias, rows):
            z = _logits(h32, w, b)  # (N, c)
            lse = torch.logaddexp(lse, z.logsumexp(-1))
            top, at = z.topk(min(k, z.shape[1]), dim=-1)  # (N, ≤k)
            merged, pick = torch.cat([best, top], -1).topk(min(k, best.shape[1] + top.shape[1]), dim=-1)
            ids = torch.cat([ids, at + start], -1).gather(-1, pick)
            best = merged
        return best - lse[:, None], ids


def _frozen(head):
    weight, bias = head.weight, getattr(head, "bias", None)
    if weight.requires_grad or (bias is not None and bias.requires_grad):
        raise TrainError("the fp32 log-prob head needs a frozen output layer; the LoRA must not train lm_head.")
    return weight, bias


def _chunk_rows(hidden) -> int:
    return max(1, CHUNK_BYTES // (4 * (hidden.shape[0] + hidden.shape[1])))


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
        def forward(ctx: Any, hidden, weight, bias, targets, rows: int, save_probs_max: int):  # targets (N, K)
            h32 = hidden.float()  # (N, H)
            n = h32.shape[0]
            lse = torch.full((n,), float("-inf"), dtype=torch.float32, device=h32.device)  # (N,)
            picked = torch.zeros(targets.shape, dtype=torch.float32, device=h32.device)  # (N, K) the targets' logits
            keep = ctx.needs_input_grad[0] and n * weight.shape[0] <= save_probs_max
            kept: list[Any] = []
            for start, w, b in _chunks(weight, bias, rows):
                z = _logits(h32, w, b)  # (N, c)
                lse = torch.logaddexp(lse, z.logsumexp(-1))
                inside = (targets >= start) & (targets < start + w.shape[0])  # (N, K)
                local = (targets - start).clamp(0, w.shape[0] - 1)  # (N, K)
                picked = torch.where(inside, z.gather(-1, local), picked)
                if keep:
                    kept.append(z)
            if keep:  # logits → probabilities once lse is known; freed with the graph
                kept = [torch.exp(z - lse[:, None]) for z in kept]  # (N, c) each
            ctx.rows, ctx.kept = rows, kept
            ctx.save_for_backward(hidden, weight, bias, targets, lse)
            return picked - lse[:, None]

        @staticmethod
        def backward(ctx: Any, grad):  # grad (N, K)
            hidden, weight, bias, targets, lse = ctx.saved_tensors
            g = grad.float()
            h32 = hidden.float()
            # d logp_nk / d h_n = W[target_nk] − Σ_v p_nv W_v; one target column at a time (no (N, K, H) tensor)
            out = torch.zeros_like(h32)  # (N, H)
            for j in range(targets.shape[1]):
                out += g[:, j, None] * weight[targets[:, j]].float()
            g_all = g.sum(-1)  # (N,)
            for k, (_, w, b) in enumerate(_chunks(weight, bias, ctx.rows)):
                p = ctx.kept[k] if ctx.kept else torch.exp(_logits(h32, w, b) - lse[:, None])  # (N, c)
                out -= (p * g_all[:, None]) @ w
            ctx.kept = []
            return out.to(hidden.dtype), None, None, None, None, None

    return HeadLogProb
