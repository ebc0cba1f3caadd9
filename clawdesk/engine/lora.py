"""The served GGUF LoRA adapter on one llama.cpp context: loading it (hot-swap), setting it on or off, freeing it.

:class:`LoraSlot` holds the native ``llama_adapter_lora_p`` and whether the context has it set now.
It is used only by :class:`~clawdesk.engine.llama.Engine`, under the engine lock; the engine keeps
the served version number and drops the chat's saved KV prefix when the weights change. Before
llama.cpp's native parser sees a file it is checked in Python (:func:`clawdesk.gguf.adapters.check_gguf_lora`).
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

from clawdesk.errors import AdapterError
from clawdesk.gguf.adapters import BaseDims, check_gguf_lora


class LoraSlot:
    """At most one loaded LoRA for ``llm`` (a ``llama_cpp.Llama``); every method is called under the engine lock."""

    def __init__(self, llm) -> None:
        self.llm = llm
        self.handle: Any = None  # llama_adapter_lora_p of the served adapter
        self.path: Path | None = None
        self.applied = False  # whether the context currently has the adapter set

    def check(self, path: Path, arch: str) -> None:
        """Format, arch and shapes vs this base: llama.cpp should only ever see an intact GGUF LoRA made for it."""
        check_gguf_lora(path, arch=arch, dims=BaseDims.from_metadata(self.llm.metadata))

    def swap(self, path: Path) -> None:
        """Load ``path`` and set it on the context, replacing the adapter loaded before.

        All or nothing: when llama.cpp cannot read the file or refuses to apply it, AdapterError is
        raised and the adapter loaded before (or none) is still the one the next call sets.
        """
        import llama_cpp

        adapter = llama_cpp.llama_adapter_lora_init(self.llm._model.model, str(path).encode("utf-8"))
        if not adapter:
            raise AdapterError(f"llama.cpp could not load the LoRA adapter {path}")
        adapters = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(adapter)
        scales = (ctypes.c_float * 1)(1.0)
        if llama_cpp.llama_set_adapters_lora(self.llm._ctx.ctx, adapters, 1, scales) != 0:
            llama_cpp.llama_adapter_lora_free(adapter)
            # What the context holds after a refusal is unspecified: clear it, so the next
            # call's apply() sets the previous adapter (still self.handle) again.
            llama_cpp.llama_set_adapters_lora(self.llm._ctx.ctx, None, 0, None)
            self.applied = False
            self.llm.reset()
            raise AdapterError(f"llama.cpp refused to apply the LoRA adapter {path}")
        previous = self.handle
        self.handle, self.path = adapter, path
        self.applied = True
        self.llm.reset()  # KV entries computed under the other weights must not be reused
        if previous is not None:
            llama_cpp.llama_adapter_lora_free(previous)  # no longer set on the context

    def apply(self, want: bool) -> None:
        """Set the loaded adapter on the context (``want``) or take it off; a change drops the KV cache."""
        import llama_cpp

        want = want and self.handle is not None
        if want == self.applied:
            return
        ctx = self.llm._ctx.ctx
        if want:
            adapters = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(self.handle)
            scales = (ctypes.c_float * 1)(1.0)
            if llama_cpp.llama_set_adapters_lora(ctx, adapters, 1, scales) != 0:
                raise AdapterError(f"llama.cpp refused the adapter {self.path}")
        else:
            llama_cpp.llama_set_adapters_lora(ctx, None, 0, None)
        self.applied = want
        # KV entries computed under the other weights must not be reused.
        self.llm.reset()

    def free(self) -> bool:
        """Take the adapter off the context and free it; False when none was loaded."""
        import llama_cpp

        if self.handle is None:
            return False
        if self.applied:
            llama_cpp.llama_set_adapters_lora(self.llm._ctx.ctx, None, 0, None)
            self.applied = False
            self.llm.reset()
        llama_cpp.llama_adapter_lora_free(self.handle)
        self.handle, self.path = None, None
        return True
