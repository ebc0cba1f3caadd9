"""Log-probabilities of given continuations, read from llama.cpp's per-position logits.

The caller (:meth:`clawdesk.engine.llama.Engine.continuation_logprobs`) holds the engine and has
evaluated the prompt; this module decodes each continuation after it as one batch that asks for
the logits of every position. Without ``logits_all`` llama.cpp keeps only the last position's
logits and llama-cpp-python keeps no copy, so they are read with ``llama_get_logits_ith``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def continuation_sums(
    llm, continuations: Sequence[Sequence[int]], stopped_by_us: Callable[[RuntimeError], bool]
) -> list[float] | None:
    """Σ_j log p(cont[j] | prompt, cont[:j]) for each continuation; None if a chat call preempted it.

    ``llm`` holds the evaluated prompt (``llm.n_tokens`` of it) and is left at the prompt's end.
    ``stopped_by_us`` tells a decode aborted for the chat (engine/preempt.py) from a real error.
    """
    import llama_cpp
    import numpy as np

    base, n_vocab = llm.n_tokens, llm.n_vocab()

    def logprobs_at(i: int) -> np.ndarray:
        ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, i)
        row = np.ctypeslib.as_array(ptr, shape=(n_vocab,)).astype(np.float64)  # (vocab,) a copy
        top = row.max()
        return row - (top + np.log(np.exp(row - top).sum()))

    first = logprobs_at(-1)
    out: list[float] = []
    for cont in continuations:
        total = float(first[cont[0]])
        fed = list(cont[:-1])  # position j predicts cont[j + 1]
        for start in range(0, len(fed), llm.n_batch):
            chunk = fed[start : start + llm.n_batch]
            llm._ctx.kv_cache_seq_rm(-1, base + start, -1)
            llm._batch.set_batch(batch=chunk, n_past=base + start, logits_all=True)
            try:
                llm._ctx.decode(llm._batch)
            except RuntimeError as exc:
                if not stopped_by_us(exc):
                    raise
                llm.n_tokens = base  # llama.cpp removed the aborted positions; the prompt stays
                return None
            targets = cont[start + 1 : start + 1 + len(chunk)]
            total += sum(float(logprobs_at(j)[tok]) for j, tok in enumerate(targets))
        out.append(total)
    llm.n_tokens = base
    return out
