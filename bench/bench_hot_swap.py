"""Hot-swapping a LoRA adapter vs reloading the base model, on the bundled SmolLM2 GGUF.

Prints the median time of ``Engine.load_adapter`` (llama.cpp adapter init + set + KV reset) and
its ratio to loading the base model in the same process; no assertions (machines are noisy).

    python bench/bench_hot_swap.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from clawdesk.engine import Engine
from clawdesk.learn.gguf_lora import write_gguf_lora
from clawdesk.models import DEMO_NAME, resolve_model


def lora_state(meta: dict[str, str], rank: int) -> dict[str, np.ndarray]:
    """A random rank-``rank`` LoRA over all seven projections, shaped from the GGUF's metadata."""
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


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    model = resolve_model(DEMO_NAME, tmp, explicit=True)
    loads = []
    for _ in range(3):
        t = time.perf_counter()
        engine = Engine.load(model, sha256="bench", n_ctx=1024, n_threads=1)
        loads.append(time.perf_counter() - t)
        engine.close()
    engine = Engine.load(model, sha256="bench", n_ctx=1024, n_threads=1)
    meta = engine.llm.metadata
    heads, kv_heads = int(meta["llama.attention.head_count"]), int(meta["llama.attention.head_count_kv"])
    adapter = write_gguf_lora(
        lora_state(meta, 16), tmp / "adapter.gguf", arch="llama", alpha=32, rank=16, n_head=heads, n_head_kv=kv_heads
    )
    swaps = []
    for _ in range(7):
        t = time.perf_counter()
        engine.load_adapter(adapter, 1)
        swaps.append(time.perf_counter() - t)
        engine.clear_adapter()
    engine.close()
    base, swap = statistics.median(loads), statistics.median(swaps)
    print(f"base model load (baseline): {base * 1000:8.1f} ms  (median of {len(loads)})")
    print(f"adapter hot-swap, r=16:     {swap * 1000:8.1f} ms  (median of {len(swaps)})")
    print(f"swap / reload ratio:        {swap / base:8.3f}")


if __name__ == "__main__":
    main()
