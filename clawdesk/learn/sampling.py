"""Sampling replies in the trainer process: the teacher's for context distillation, the base's for the anchor,
the adapter's own greedy ones for the learned check.

Owns one function, :func:`sample_replies`, a plain KV-cached decoding loop over a left-padded batch
(position ids counted from each row's first real token, as :func:`clawdesk.learn.logprobs.reply_logprobs`
scores them). It draws from its own seeded ``torch.Generator``, so a run's samples do not depend on
what else used torch's global random state, and the same seed gives the same replies.

Why here and not at judge time on llama.cpp: the trainer already holds the base weights (the
teacher is the base with the hint in context, :mod:`clawdesk.judge.teacher`), and a reply sampled
at judge time would need a new store column for something only the trainer reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def sample_replies(
    model,
    prompts: Sequence[Sequence[int]],
    device: str,
    *,
    max_tokens: int,
    temperature: float,
    eos_ids: Sequence[int],
    seed: int,
) -> list[list[int]]:
    """One sampled reply per prompt, at most ``max_tokens`` tokens, ending with an ``eos_ids`` token when one came.

    ``model`` is a causal LM (a PeftModel samples with whatever adapter state its caller set, e.g.
    inside ``disable_adapter()``). Sampling is from softmax(logits / ``temperature``), no top-p;
    ``temperature`` 0 is greedy (the learned check's own replies).
    """
    import torch

    if not prompts:
        return []
    if any(not p for p in prompts):
        raise ValueError("sample_replies needs at least one prompt token per prompt")
    B, L = len(prompts), max(len(p) for p in prompts)
    ids = torch.zeros((B, L), dtype=torch.long)  # (B, L) left-padded
    attn = torch.zeros((B, L), dtype=torch.long)  # (B, L)
    for b, p in enumerate(prompts):
        ids[b, L - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        attn[b, L - len(p) :] = 1
    ids, attn = ids.to(device), attn.to(device)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # (B, L)
    gen = torch.Generator(device=device).manual_seed(seed)
    eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long, device=device)  # (E,)
    done = torch.zeros(B, dtype=torch.bool, device=device)  # (B,)
    cache_kw = _cache_keyword(model)
    out: list[list[int]] = [[] for _ in range(B)]
    with torch.no_grad():
        res = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True, logits_to_keep=1)
        past, logits = res.past_key_values, res.logits[:, -1]  # (B, V)
        next_pos = pos[:, -1:]  # (B, 1)
        for _ in range(max_tokens):
            tok = _draw(logits, temperature, gen)  # (B,)
            for b in torch.nonzero(~done).flatten().tolist():
                out[b].append(int(tok[b]))
            done |= torch.isin(tok, eos)
            if bool(done.all()):
                break
            attn = torch.cat([attn, torch.ones((B, 1), dtype=attn.dtype, device=device)], dim=1)  # (B, L + n)
            next_pos = next_pos + 1  # (B, 1)
            res = model(
                input_ids=tok[:, None], attention_mask=attn, position_ids=next_pos, use_cache=True, logits_to_keep=1,
                **{cache_kw: past},
            )  # fmt: skip
            past, logits = res.past_key_values, res.logits[:, -1]  # (B, V)
    return out


def _cache_keyword(model) -> str:
    """transformers 5.x renamed ``past_key_values`` to ``cache`` (the old name warns, then goes away)."""
    import inspect

    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"


def _draw(logits: Any, temperature: float, gen: Any):
    import torch

    if temperature == 0:
        return logits.argmax(dim=-1)  # (B,) greedy: what the model writes when it is not sampled
    probs = torch.softmax(logits.float() / temperature, dim=-1)  # (B, V) fp32: bf16 rounds small probs to 0
    return torch.multinomial(probs, 1, generator=gen).squeeze(-1)  # (B,)
