"""Random LoRA adapters for the bundled demo model (SmolLM2-135M) and their ``adapters`` rows.

Shared by the hot-swap, swap-failure and adapter-file tests: real GGUF LoRA files that llama.cpp
loads onto the demo GGUF, with weights large enough to change its greedy replies.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from clawdesk.gguf.lora import write_gguf_lora
from clawdesk.store import Store, now_iso

# SmolLM2-135M: 30 layers, hidden 576, 9 heads / 3 KV heads of 64, FFN 1536.
SHAPES = {"q_proj": (576, 576), "k_proj": (576, 192), "v_proj": (576, 192), "o_proj": (576, 576),
          "gate_proj": (576, 1536), "up_proj": (576, 1536), "down_proj": (1536, 576)}  # fmt: skip
RANK = 4


def lora_state(seed: int = 0, *, r: int = RANK, layers: int = 30, shapes=SHAPES) -> dict[str, np.ndarray]:
    """PEFT-named LoRA tensors (A: (r, in), B: (out, r)) with N(0, 0.05) entries."""
    rng = np.random.default_rng(seed)
    state = {}
    for i in range(layers):
        for name, (d_in, d_out) in shapes.items():
            group = "self_attn" if name.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp"
            key = f"base_model.model.model.layers.{i}.{group}.{name}"
            state[f"{key}.lora_A.weight"] = rng.normal(0, 0.05, (r, d_in)).astype(np.float32)
            state[f"{key}.lora_B.weight"] = rng.normal(0, 0.05, (d_out, r)).astype(np.float32)
    return state


def write_demo_gguf(state: dict[str, np.ndarray], path: Path, *, arch: str = "llama", rank: int = RANK) -> Path:
    """``state`` as a GGUF LoRA for the demo model's attention layout."""
    write_gguf_lora(state, path, arch=arch, alpha=8, rank=rank, n_head=9, n_head_kv=3)
    return path


def write_version_dir(path: Path, *, sha: str = "test-sha", arch: str = "llama", seed: int = 0, **state_kw) -> Path:
    """A complete version dir as the trainer lays it out (GGUF LoRA, PEFT safetensors + config, metadata)."""
    from safetensors.numpy import save_file

    path.mkdir(parents=True)
    state = lora_state(seed, **state_kw)
    rank = state_kw.get("r", RANK)
    write_demo_gguf(state, path / "adapter.gguf", arch=arch, rank=rank)
    save_file(state, str(path / "adapter_model.safetensors"))
    targets = sorted(state_kw.get("shapes", SHAPES))
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": 8, "target_modules": targets}
    (path / "adapter_config.json").write_text(json.dumps(config))
    (path / "metadata.json").write_text(json.dumps({"version": 1, "base": {"sha256": sha, "arch": arch}}))
    return path


def add_version_row(
    store: Store,
    vdir: Path,
    n: int,
    *,
    status: str = "ready",
    sha: str = "test-sha",
    metrics=None,
    note: str = "",
    validation=None,
) -> None:
    """The ``adapters`` row of version ``n`` stored in ``vdir``, for the demo engine's sha ("test-sha")."""
    with store.transaction():
        store.db.execute(
            "INSERT INTO adapters(version, status, base_name, base_sha256, path, n_samples, metrics, validation, note,"
            " created_at) VALUES (?, ?, 'smollm2-135m', ?, ?, 1, ?, ?, ?, ?)",
            [n, status, sha, str(vdir), json.dumps(metrics or {}), json.dumps(validation or {}), note, now_iso()],
        )


def add_version(store: Store, tmp_path: Path, n: int, *, status="ready", sha="test-sha", seed=0) -> None:
    """Version ``n``: a random demo LoRA in ``tmp_path/vN`` and its ``adapters`` row."""
    vdir = tmp_path / f"v{n}"
    vdir.mkdir()
    write_demo_gguf(lora_state(seed), vdir / "adapter.gguf")
    note = "collapsed" if status == "rejected" else ""
    add_version_row(store, vdir, n, status=status, sha=sha, metrics={"loss": 0.5}, note=note)
