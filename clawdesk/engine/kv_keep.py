"""Keeping the chat's cached prompt across side work on the same llama.cpp context.

The judge shares the served engine's context with the chat (one model load). Its prompts start
with a different system message, so each judge call would overwrite the chat's KV cache and the
next chat message would re-evaluate the whole conversation (seconds per 1k tokens for Qwen3-4B on
a CPU). :class:`ChatKVKeeper` copies sequence 0's KV cells out (llama.cpp's per-sequence state
API: only the KV, not ``Llama.save_state``'s (n_batch x vocab) logits array) before side work
overwrites a chat prefix, and copies them back when the next chat call's prompt starts with that
prefix, so only the new suffix is evaluated.

Bounded: one saved state, only for prefixes of :data:`MIN_KEEP_TOKENS` or more. It is as large
as the chat's KV cells (Qwen3-4B, f16 KV: 144 KiB per token, ~0.3 GB for a 2k-token chat; at most
the context's KV cache again) and costs a memcpy each way, against seconds of re-evaluation. A saved state is
restored only under the adapter state (on/off, which adapter) it was computed under. The engine
calls every method under its lock.
"""

from __future__ import annotations

import ctypes
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

MIN_KEEP_TOKENS = 32  # shorter chat prefixes are cheaper to re-evaluate than to keep


@dataclass
class _Saved:
    tokens: list[int]  # the token ids whose KV ``data`` holds, from position 0
    data: object  # numpy uint8 array: llama_state_seq_get_data's bytes
    adapter: Hashable  # the engine's adapter key when the KV was computed


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class ChatKVKeeper:
    """One saved chat KV prefix, and whether the context's cache now holds chat (not side) tokens."""

    def __init__(self) -> None:
        self._saved: _Saved | None = None
        self.chat_owned = False  # the tokens cached now were evaluated by a chat call
        self.restores = 0  # how many chat calls started from a restored prefix (for tests and the bench)

    @property
    def saved_tokens(self) -> int:
        return len(self._saved.tokens) if self._saved else 0

    @property
    def saved_bytes(self) -> int:
        return int(self._saved.data.nbytes) if self._saved else 0

    def drop(self) -> None:
        self._saved = None

    def before_side(self, llm, side_ids: Sequence[int], adapter: Hashable) -> None:
        """Save the cached chat prefix if side work on ``side_ids`` is about to overwrite it."""
        import llama_cpp
        import numpy as np

        n = llm.n_tokens
        if not self.chat_owned or n < MIN_KEEP_TOKENS or getattr(llm, "_is_recurrent", False):
            return
        if getattr(llm, "_is_hybrid", False):  # recurrent state cannot be cut back to a prefix
            return
        cached = llm.input_ids[:n].tolist()
        if common_prefix(cached, side_ids) >= n:
            return  # the side prompt extends the chat's: nothing is overwritten
        ctx = llm._ctx.ctx
        llm._ctx.kv_cache_seq_rm(-1, n, -1)  # cells past n_tokens are dead; keep them out of the copy
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        if size <= 0:
            return
        data = np.empty(size, dtype=np.uint8)
        written = llama_cpp.llama_state_seq_get_data(ctx, data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), size, 0)
        if written <= 0:
            return  # nothing saved: the next chat call re-evaluates, as without the keeper
        self._saved = _Saved(tokens=cached, data=data[:written], adapter=adapter)

    def restore_for_chat(self, llm, ids: Sequence[int], adapter: Hashable) -> bool:
        """Put the saved prefix back if it serves ``ids`` better than what is cached. True if restored.

        Call after the adapter for this chat call is applied (applying one drops the cache).
        """
        import llama_cpp

        saved = self._saved
        if saved is None or saved.adapter != adapter:
            return False
        current = common_prefix(llm.input_ids[: llm.n_tokens].tolist(), ids) if llm.n_tokens else 0
        keep = min(common_prefix(saved.tokens, ids), len(ids) - 1)  # as _eval_prompt: >= 1 token evaluated
        if keep <= current:
            return False
        data = saved.data
        self._saved = None  # the cache takes it over; one copy is enough
        ok = llama_cpp.llama_state_seq_set_data(
            llm._ctx.ctx, data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), data.nbytes, 0
        )
        if not ok:
            # llama.cpp cleared the sequence before failing: start from an empty cache.
            llm.reset()
            return False
        llm.input_ids[: len(saved.tokens)] = saved.tokens
        llm.n_tokens = keep  # eval() drops the restored cells past the common prefix
        llm._requires_eval = True  # no logits belong to the restored cells
        self.restores += 1
        return True
