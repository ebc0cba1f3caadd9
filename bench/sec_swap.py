"""Bench section "swap": hot-swapping a LoRA adapter into the running engine vs reloading the base model.

On the bundled SmolLM2 GGUF, in one process: the median time of ``Engine.load`` (the baseline: what
serving a new adapter would cost without hot-swap) and of ``Engine.load_adapter`` (file checks,
llama.cpp adapter init + set + KV reset) on a random rank-16 GGUF LoRA over all seven projections.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

RANK = 16


def lora_state(meta: dict[str, str], rank: int) -> dict:
    """A random rank-``rank`` PEFT LoRA state dict over all seven projections, shaped from the GGUF's metadata."""
    import numpy as np

    from clawdesk.gguf.adapters import KIND_OF_MODULE, BaseDims

    dims = BaseDims.from_metadata(meta)
    if dims is None:
        raise ValueError("the GGUF's metadata does not give the layer sizes")
    rng = np.random.default_rng(0)
    state = {}
    for i in range(dims.n_layer):
        for name, kind in KIND_OF_MODULE.items():
            d_in, d_out = dims.in_out(kind)
            group = "mlp" if kind.startswith("ffn") else "self_attn"
            key = f"base_model.model.model.layers.{i}.{group}.{name}"
            state[f"{key}.lora_A.weight"] = rng.normal(0, 0.02, (rank, d_in)).astype(np.float32)
            state[f"{key}.lora_B.weight"] = rng.normal(0, 0.02, (d_out, rank)).astype(np.float32)
    return state


def write_random_adapter(engine, path: Path, rank: int = RANK) -> Path:
    """A random rank-``rank`` GGUF LoRA for ``engine``'s base at ``path``."""
    from clawdesk.gguf.lora import write_gguf_lora

    meta = engine.llm.metadata
    arch = meta["general.architecture"]
    return write_gguf_lora(
        lora_state(meta, rank),
        path,
        arch=arch,
        alpha=2 * rank,
        rank=rank,
        n_head=int(meta[f"{arch}.attention.head_count"]),
        n_head_kv=int(meta[f"{arch}.attention.head_count_kv"]),
    )


def time_swaps(engine, adapter: Path, n: int) -> list[float]:
    """ms of ``n`` hot-swaps of ``adapter`` into ``engine`` (each followed by turning it off again)."""
    swaps = []
    for i in range(n):
        t = time.perf_counter()
        engine.load_adapter(adapter, i + 1)
        swaps.append((time.perf_counter() - t) * 1000)
        engine.clear_adapter()
    return swaps


def measure(quick: bool, log: Callable[[str], None]) -> dict[str, dict]:
    from clawdesk.config import ModelConfig
    from clawdesk.engine import Engine
    from clawdesk.gguf.adapters import BaseDims, check_gguf_lora
    from clawdesk.models import DEMO_NAME, resolve_model

    n_loads, n_swaps = (3, 5) if quick else (5, 15)
    model = resolve_model(DEMO_NAME, Path("/nonexistent"), explicit=True)
    n_ctx = ModelConfig().n_ctx  # the app's context size, for the served engine and the reload alike
    with tempfile.TemporaryDirectory(prefix="clawdesk-bench-swap-") as tmp:
        engine = Engine.load(model, sha256="bench", n_ctx=n_ctx)
        try:
            meta = engine.llm.metadata
            arch = meta["general.architecture"]
            adapter = write_random_adapter(engine, Path(tmp) / "adapter.gguf")
            adapter_bytes = adapter.stat().st_size
            engine.load_adapter(adapter, 1)  # warm-up: page cache for the adapter file
            engine.clear_adapter()
            dims = BaseDims.from_metadata(meta)
            loads, swaps, checks = [], [], []
            # Interleaved (load, swap, load, swap, ...) so drift on a shared machine hits both.
            for i in range(max(n_loads, n_swaps)):
                if i < n_loads:
                    t = time.perf_counter()
                    other = Engine.load(model, sha256="bench", n_ctx=n_ctx)
                    loads.append((time.perf_counter() - t) * 1000)
                    other.close()
                if i < n_swaps:
                    swaps += time_swaps(engine, adapter, 1)
                    # The Python-side file check alone: load_adapter runs it before taking the engine
                    # lock, so only the rest (llama.cpp init + set + KV reset) can delay a reply.
                    t = time.perf_counter()
                    check_gguf_lora(adapter, arch=arch, dims=dims)
                    checks.append((time.perf_counter() - t) * 1000)
            log(
                f"reload {statistics.median(loads):.1f} ms, hot-swap {statistics.median(swaps):.2f} ms "
                f"(of which the file check {statistics.median(checks):.2f} ms)"
            )
        finally:
            engine.close()
    load_ms, swap_ms = statistics.median(loads), statistics.median(swaps)
    check_ms = statistics.median(checks)
    raw = {
        "reload_ms": loads,
        "swap_ms": swaps,
        "check_ms": checks,
        "swap_under_lock_ms_median": swap_ms - check_ms,  # what a reply waiting for the engine could notice
        "rank": RANK,
        "adapter_bytes": adapter_bytes,
        "n_ctx": n_ctx,
    }
    return {
        "swap_speedup": {
            "value": load_ms / swap_ms,
            "unit": "x",
            "goal": ">= 10",
            "what": "full model reload ÷ adapter hot-swap into the running engine",
            "raw": raw,
        },
        "swap_ms": {
            "value": swap_ms,
            "unit": "ms",
            "goal": "",
            "what": f"hot-swap of a rank-{RANK} GGUF LoRA (checks, llama.cpp init + set, KV reset)",
            "raw": {"median_reload_ms": load_ms, "swap_ms": swaps, "check_ms": checks},
        },
    }
