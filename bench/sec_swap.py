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

    arch = meta["general.architecture"]
    hidden, ffn = int(meta[f"{arch}.embedding_length"]), int(meta[f"{arch}.feed_forward_length"])
    heads, kv_heads = int(meta[f"{arch}.attention.head_count"]), int(meta[f"{arch}.attention.head_count_kv"])
    kv = hidden // heads * kv_heads
    shapes = {"q_proj": (hidden, hidden), "k_proj": (hidden, kv), "v_proj": (hidden, kv), "o_proj": (hidden, hidden),
              "gate_proj": (hidden, ffn), "up_proj": (hidden, ffn), "down_proj": (ffn, hidden)}  # fmt: skip
    rng = np.random.default_rng(0)
    state = {}
    for i in range(int(meta[f"{arch}.block_count"])):
        for name, (d_in, d_out) in shapes.items():
            group = "mlp" if name in ("gate_proj", "up_proj", "down_proj") else "self_attn"
            key = f"base_model.model.model.layers.{i}.{group}.{name}"
            state[f"{key}.lora_A.weight"] = rng.normal(0, 0.02, (rank, d_in)).astype(np.float32)
            state[f"{key}.lora_B.weight"] = rng.normal(0, 0.02, (d_out, rank)).astype(np.float32)
    return state


def measure(quick: bool, log: Callable[[str], None]) -> dict[str, dict]:
    from clawdesk.engine import Engine
    from clawdesk.learn.adapter_files import BaseDims, check_gguf_lora
    from clawdesk.learn.gguf_lora import write_gguf_lora
    from clawdesk.models import DEMO_NAME, resolve_model

    n_loads, n_swaps = (3, 5) if quick else (5, 15)
    model = resolve_model(DEMO_NAME, Path("/nonexistent"), explicit=True)
    with tempfile.TemporaryDirectory(prefix="clawdesk-bench-swap-") as tmp:
        engine = Engine.load(model, sha256="bench", n_ctx=1024)
        try:
            meta = engine.llm.metadata
            arch = meta["general.architecture"]
            adapter = write_gguf_lora(
                lora_state(meta, RANK),
                Path(tmp) / "adapter.gguf",
                arch=arch,
                alpha=2 * RANK,
                rank=RANK,
                n_head=int(meta[f"{arch}.attention.head_count"]),
                n_head_kv=int(meta[f"{arch}.attention.head_count_kv"]),
            )
            adapter_bytes = adapter.stat().st_size
            engine.load_adapter(adapter, 1)  # warm-up: page cache for the adapter file
            engine.clear_adapter()
            dims = BaseDims.from_metadata(meta)
            loads, swaps, checks = [], [], []
            # Interleaved (load, swap, load, swap, ...) so drift on a shared machine hits both.
            for i in range(max(n_loads, n_swaps)):
                if i < n_loads:
                    t = time.perf_counter()
                    other = Engine.load(model, sha256="bench", n_ctx=1024)
                    loads.append((time.perf_counter() - t) * 1000)
                    other.close()
                if i < n_swaps:
                    t = time.perf_counter()
                    engine.load_adapter(adapter, i + 1)
                    swaps.append((time.perf_counter() - t) * 1000)
                    engine.clear_adapter()
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
