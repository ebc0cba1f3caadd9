"""Reply log-probs of a batch: micro-batches by token budget, the padded forward, right-aligned rows.

The learner (:mod:`clawdesk.learn.learner`) and the learned check score every reply through
:func:`reply_logprobs`; :func:`micro_batches` keeps each forward within ``train.token_budget``;
:func:`reply_topk` gives a teacher's likeliest tokens at each reply position (``train.student_topk``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clawdesk.errors import TrainError


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


def reply_logprobs(model, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], device: str, *, at=None):
    """Log-probs of each reply's tokens given its prompt, as one padded batch: ``(logp, mask)``, both ``(B, T)``.

    ``logp[b, t] = log softmax(logits at position of token t − 1)[token t]`` over reply tokens,
    T = the longest reply. Rows are left-padded so every reply ends at the last position. Position ids
    count from each row's first real token, so padding shifts no rotary position and a row's log-probs
    equal those of the row alone. Reply ``b`` occupies ``[T − len(reply_b), T)``; ``mask`` marks those
    positions (``logp`` is 0 elsewhere). Only the reply positions' final hidden states go through the
    output layer, in fp32 (:mod:`clawdesk.learn.head`): a bf16 base's own logits would add up to
    ~0.1 nat of rounding noise to every log-prob.

    ``at``: one ``(len(reply), K)`` tensor of token ids per pair; then ``logp`` is ``(B, T, K)``, the
    log-probs of those tokens at each reply position instead of the reply's own (the top-K distillation).
    """
    import torch

    from clawdesk.learn.head import head_logprobs

    kept, targets, mask, lm = _reply_states(model, pairs, device)
    B, T = mask.shape
    if at is not None:
        targets = torch.cat([a.to(device) for a in at])  # (N, K): rows in mask order, as the replies are
        values = head_logprobs(kept, lm.get_output_embeddings(), targets)  # (N, K) fp32
        logp = torch.zeros((B, T, targets.shape[1]), dtype=torch.float32, device=device)  # (B, T, K)
        logp[mask] = values
        return logp, mask
    values = head_logprobs(kept, lm.get_output_embeddings(), targets)  # (N,) fp32
    logp = torch.zeros((B, T), dtype=torch.float32, device=device).masked_scatter(mask, values)  # (B, T)
    return logp, mask


def reply_topk(model, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], device: str, k: int):
    """The ``k`` likeliest tokens at each reply position, no gradient: per pair ``(logp, ids)``, both
    ``(len(reply), k)``, likeliest first."""
    from clawdesk.learn.head import head_topk

    kept, _, _, lm = _reply_states(model, pairs, device)
    logp, ids = head_topk(kept, lm.get_output_embeddings(), k)  # (N, k) each, rows in mask order
    sizes = [len(r) for _, r in pairs]
    return list(zip(logp.cpu().split(sizes), ids.cpu().split(sizes), strict=True))


def _reply_states(model, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], device: str):
    """The padded forward of :func:`reply_logprobs`: ``(hidden (N, H), targets (N,), mask (B, T), lm)``, with
    N the reply tokens in mask order: the final hidden state that predicts each reply token, and that token."""
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
    ids, attn, pos, mask = ids.to(device), attn.to(device), pos.to(device), mask.to(device)
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model  # PeftModel → its LoRA-injected model
    if getattr(lm.config, "final_logit_softcapping", None):
        raise TrainError(f"{lm.config.model_type} soft-caps its logits; the learner's log-prob head does not.")
    # The decoder stack alone (the LoRA layers and disable_adapter() act inside it), then the head ourselves.
    hidden = lm.get_decoder()(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False).last_hidden_state
    kept = hidden[:, L - T - 1 : -1][mask]  # (N, H): positions L−T−1 .. L−2 predict tokens L−T .. L−1; replies only
    targets = ids[:, L - T :][mask]  # (N,)
    return kept, targets, mask, lm


def aligned(rows: Sequence[Any], T: int, fill):
    """Stack per-sample reply tensors ``(len(reply),)`` (or ``(len(reply), K)``) right-aligned into ``(B, T)``
    (or ``(B, T, K)``), as :func:`reply_logprobs` lays them out."""
    out = fill.clone()  # (B, T)
    for b, row in enumerate(rows):
        if row is not None:
            out[b, T - row.shape[0] :] = row.to(out.device, out.dtype)
    return out
