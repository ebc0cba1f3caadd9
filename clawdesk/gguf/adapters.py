"""Adapter files on disk: is this adapter dir or file intact, safe to read, and right for this base?

Every place that hands an adapter to a library goes through here first: the served GGUF LoRA before
llama.cpp sees it (:func:`check_gguf_lora`, from ``reload.check_servable`` and ``Engine.load_adapter``)
and a parent version's PEFT weights before training continues from them (:func:`check_peft_dir`, from
:mod:`clawdesk.learn.peft_adapter`). Only two formats are ever read, both data-only: GGUF
(:mod:`clawdesk.gguf.header`) and safetensors (``safetensors``). A pickle (``adapter_model.bin``,
``.pt``) is never opened, whatever its name: a pickle renamed to ``.gguf`` or ``.safetensors`` fails
on the magic bytes / header before any byte of it is interpreted, because unpickling can run
arbitrary code.

Checks: the format's magic and a complete parse (truncation included); for GGUF, ``general.type``
adapter / ``adapter.type`` lora and the base's architecture; for both, LoRA tensor names, one rank
throughout, A/B pairs complete, and shapes against the base's dimensions when they are known; and
``metadata.json``'s base sha256 against the served base. Failures are :class:`AdapterError`\\ s that
name the file and say what to do.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawdesk.errors import AdapterError
from clawdesk.gguf.header import MAGIC, HeaderError, read_header

ADAPTER_GGUF = "adapter.gguf"
PEFT_CONFIG = "adapter_config.json"
PEFT_WEIGHTS = "adapter_model.safetensors"
METADATA_JSON = "metadata.json"
PICKLE_NAMES = ("adapter_model.bin", "adapter_model.pt", "adapter_model.pth")

SERVE_FIX = "Serve another version (`clawdesk adapters rollback`, or `clawdesk adapters use N`)."

# HF module names (what PEFT adapts) -> llama.cpp tensor kinds, for the arches gguf.lora writes.
KIND_OF_MODULE = {
    "q_proj": "attn_q",
    "k_proj": "attn_k",
    "v_proj": "attn_v",
    "o_proj": "attn_output",
    "gate_proj": "ffn_gate",
    "up_proj": "ffn_up",
    "down_proj": "ffn_down",
}
_GGUF_NAME = re.compile(r"^blk\.(?P<layer>\d+)\.(?P<kind>[a-z_]+)\.weight\.lora_(?P<ab>[ab])$")
_PEFT_NAME = re.compile(
    r"^base_model\.model\.(?:.+\.)?layers\.(?P<layer>\d+)\.(?:self_attn|mlp)\.(?P<module>[a-z_]+)\.lora_(?P<ab>[AB])\.weight$"
)


@dataclass(frozen=True)
class BaseDims:
    """The base model's sizes that fix every LoRA matrix shape (from its GGUF metadata)."""

    arch: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any]) -> BaseDims | None:
        """From GGUF key/values (``llm.metadata`` of llama-cpp-python, or a header read); None if incomplete."""
        arch = str(meta.get("general.architecture", ""))
        try:
            n_embd = int(meta[f"{arch}.embedding_length"])
            n_head = int(meta[f"{arch}.attention.head_count"])
            n_head_kv = int(meta.get(f"{arch}.attention.head_count_kv", n_head))
            head_k = int(meta.get(f"{arch}.attention.key_length", n_embd // n_head))
            return cls(
                arch=arch,
                n_layer=int(meta[f"{arch}.block_count"]),
                n_embd=n_embd,
                n_ff=int(meta[f"{arch}.feed_forward_length"]),
                n_head=n_head,
                n_head_kv=n_head_kv,
                head_dim_k=head_k,
                head_dim_v=int(meta.get(f"{arch}.attention.value_length", head_k)),
            )
        except (KeyError, ValueError, TypeError, ZeroDivisionError):
            return None  # an arch with other key names (or per-layer lists): shapes are left to llama.cpp

    def in_out(self, kind: str) -> tuple[int, int]:
        """(in features, out features) of the base matrix a LoRA of ``kind`` (``attn_q``…) adapts."""
        return {
            "attn_q": (self.n_embd, self.n_head * self.head_dim_k),
            "attn_k": (self.n_embd, self.n_head_kv * self.head_dim_k),
            "attn_v": (self.n_embd, self.n_head_kv * self.head_dim_v),
            "attn_output": (self.n_head * self.head_dim_v, self.n_embd),
            "ffn_gate": (self.n_embd, self.n_ff),
            "ffn_up": (self.n_embd, self.n_ff),
            "ffn_down": (self.n_ff, self.n_embd),
        }[kind]


def refuse(path: Path, problem: str, fix: str) -> AdapterError:
    """The error for an adapter file that is not used: the file, what is wrong with it, what to do."""
    return AdapterError(f"adapter file {path} {problem}. {fix}".rstrip())


def _magic(path: Path, size: int, fix: str) -> bytes:
    try:
        with path.open("rb") as fh:
            return fh.read(size)
    except FileNotFoundError:
        raise refuse(path, "is missing (deleted or moved?)", fix) from None
    except OSError as exc:
        raise refuse(path, f"cannot be read ({exc.strerror or exc})", fix) from exc


def _check_pairs(path: Path, pairs: dict[tuple[int, str], dict[str, tuple[int, int]]], fix: str) -> int:
    """Every (layer, kind) has A ne=[in, r] and B ne=[r, out] with one r throughout; returns r."""
    if not pairs:
        raise refuse(path, "holds no LoRA tensors", fix)
    ranks = set()
    for (layer, kind), pair in sorted(pairs.items()):
        if set(pair) != {"a", "b"}:
            raise refuse(path, f"is incomplete: layer {layer} {kind} has only lora_{''.join(pair)}", fix)
        a_r, b_r = pair["a"][1], pair["b"][0]
        if a_r != b_r or a_r <= 0:
            raise refuse(path, f"has mismatched LoRA ranks at layer {layer} {kind} ({a_r} vs {b_r})", fix)
        ranks.add(a_r)
    if len(ranks) != 1:
        raise refuse(path, f"mixes LoRA ranks {sorted(ranks)}", fix)
    return ranks.pop()


def _check_dims(path: Path, pairs, dims: BaseDims | None, fix: str) -> None:
    if dims is None:
        return
    for (layer, kind), pair in sorted(pairs.items()):
        if layer >= dims.n_layer:
            raise refuse(path, f"adapts layer {layer}; the base has {dims.n_layer} layers (another base)", fix)
        want_in, want_out = dims.in_out(kind)
        got_in, got_out = pair["a"][0], pair["b"][1]
        if (got_in, got_out) != (want_in, want_out):
            raise refuse(
                path,
                f"has layer {layer} {kind} of shape {got_in}->{got_out} but the base's is {want_in}->{want_out}: "
                "it was trained for another base",
                fix,
            )


def check_gguf_lora(
    path: Path, *, arch: str | None = None, dims: BaseDims | None = None, fix: str = SERVE_FIX
) -> dict[str, Any]:
    """Check a GGUF LoRA before llama.cpp loads it; return ``{"arch", "alpha", "rank", "n_tensors"}``.

    ``arch``/``dims`` (the served base's, when known) are checked too. Raises :class:`AdapterError`.
    """
    path = Path(path)
    head = _magic(path, 4, fix)
    if head != MAGIC:
        raise refuse(path, f"is not a GGUF file (it starts with {head!r}, not b'GGUF'); it was not loaded", fix)
    try:
        header = read_header(path)
    except (HeaderError, OSError) as exc:
        raise refuse(path, f"is damaged or truncated (GGUF header: {exc})", fix) from exc
    values = {key: header.fields.get(key) for key in ("general.type", "adapter.type", "adapter.lora.alpha")}
    file_arch = header.fields.get("general.architecture")
    if values["general.type"] != "adapter" or values["adapter.type"] != "lora":
        raise refuse(path, "is a GGUF but not a LoRA adapter (general.type / adapter.type)", fix)
    alpha = values["adapter.lora.alpha"]
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise refuse(path, "has no valid adapter.lora.alpha", fix)
    if arch is not None and file_arch != arch:
        raise refuse(path, f"is a LoRA for a {file_arch!r} model but the served base is {arch!r}", fix)
    pairs: dict[tuple[int, str], dict[str, tuple[int, int]]] = {}
    for t in header.tensors:
        match = _GGUF_NAME.match(t.name)
        if not match or match["kind"] not in KIND_OF_MODULE.values() or len(t.dims) != 2:
            raise refuse(path, f"has an unexpected tensor {t.name!r} {list(t.dims)}; it is not a ClawDesk LoRA", fix)
        if t.n_present != t.n_bytes:
            problem = f"is damaged or truncated (tensor {t.name} has {t.n_present} of {t.n_bytes} bytes)"
            raise refuse(path, problem, fix)
        # ggml ne order: lora_a is [in, r], lora_b is [r, out].
        pairs.setdefault((int(match["layer"]), match["kind"]), {})[match["ab"]] = (t.dims[0], t.dims[1])
    rank = _check_pairs(path, pairs, fix)
    _check_dims(path, pairs, dims, fix)
    return {"arch": file_arch, "alpha": float(alpha), "rank": rank, "n_tensors": len(header.tensors)}


def _safetensors_shapes(path: Path, fix: str) -> dict[str, list[int]]:
    from safetensors import SafetensorError, safe_open

    head = _magic(path, 9, fix)
    # safetensors: an 8-byte little-endian header length, then the JSON header ('{').
    if len(head) < 9 or head[8:9] != b"{":
        raise refuse(path, f"is not a safetensors file (it starts with {head[:8]!r}); it was not loaded", fix)
    try:
        with safe_open(str(path), framework="numpy") as fh:
            return {key: list(fh.get_slice(key).get_shape()) for key in fh.keys()}  # noqa: SIM118 -- not a dict
    except (SafetensorError, OSError, ValueError) as exc:
        raise refuse(path, f"is damaged or truncated ({exc})", fix) from exc


def read_peft_config(peft_dir: Path, fix: str) -> dict[str, Any]:
    path = Path(peft_dir) / PEFT_CONFIG
    raw = _magic(path, 1 << 20, fix)
    try:
        config = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise refuse(path, f"is not valid JSON ({exc})", fix) from exc
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        raise refuse(path, "is not a PEFT LoRA config (peft_type is not 'LORA')", fix)
    r, alpha, targets = config.get("r"), config.get("lora_alpha"), config.get("target_modules")
    targets = [targets] if isinstance(targets, str) else targets
    if not isinstance(r, int) or r <= 0 or not isinstance(alpha, (int, float)):
        raise refuse(path, f"has an invalid rank r={r!r} or lora_alpha={alpha!r}", fix)
    if not isinstance(targets, list) or not targets or not set(targets) <= set(KIND_OF_MODULE):
        raise refuse(path, f"adapts {targets!r}; ClawDesk adapters adapt only {', '.join(KIND_OF_MODULE)}", fix)
    return config


def check_peft_dir(peft_dir: Path, *, dims: BaseDims | None = None, fix: str = SERVE_FIX) -> dict[str, Any]:
    """Check a PEFT LoRA dir (config + safetensors) without loading any weights; return ``{"rank", "n_tensors"}``.

    A dir holding only a pickle ``adapter_model.bin`` is refused: it is never loaded.
    """
    peft_dir = Path(peft_dir)
    weights = peft_dir / PEFT_WEIGHTS
    if not weights.exists() and (pickled := [n for n in PICKLE_NAMES if (peft_dir / n).exists()]):
        raise refuse(peft_dir / pickled[0], f"is a pickle and {PEFT_WEIGHTS} is missing; pickles are never loaded", fix)
    config = read_peft_config(peft_dir, fix)
    pairs: dict[tuple[int, str], dict[str, tuple[int, int]]] = {}
    shapes = _safetensors_shapes(weights, fix)
    for key, shape in shapes.items():
        match = _PEFT_NAME.match(key)
        if not match or match["module"] not in KIND_OF_MODULE or len(shape) != 2:
            raise refuse(weights, f"has an unexpected tensor {key!r} {shape}; it is not a ClawDesk LoRA", fix)
        # PEFT's lora_A (r, in) and lora_B (out, r), reversed, are ggml's ne [in, r] / [r, out]: the same checks.
        pair = (shape[1], shape[0])
        pairs.setdefault((int(match["layer"]), KIND_OF_MODULE[match["module"]]), {})[match["ab"].lower()] = pair
    rank = _check_pairs(weights, pairs, fix)
    if rank != config["r"]:
        raise refuse(weights, f"has LoRA rank {rank} but {PEFT_CONFIG} says r={config['r']}", fix)
    _check_dims(weights, pairs, dims, fix)
    return {"rank": rank, "n_tensors": len(shapes)}


def read_metadata(version_dir: Path, fix: str) -> dict[str, Any] | None:
    """``metadata.json`` of a version dir, or None when there is none; refuses a damaged one."""
    path = Path(version_dir) / METADATA_JSON
    if not path.exists():
        return None
    raw = _magic(path, 64 << 20, fix)
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise refuse(path, f"is not valid JSON ({exc})", fix) from exc
    if not isinstance(meta, dict):
        raise refuse(path, "is not a JSON object", fix)
    return meta


def check_version_dir(
    version_dir: Path,
    *,
    base_sha256: str,
    arch: str | None = None,
    dims: BaseDims | None = None,
    peft: bool = False,
    fix: str = SERVE_FIX,
) -> dict[str, Any]:
    """Check one adapter version dir for the base with ``base_sha256``: metadata, GGUF LoRA, PEFT (``peft``).

    The architecture is ``arch`` when given, else the one ``metadata.json`` recorded. Returns the
    GGUF findings plus ``"peft"`` when checked.
    """
    version_dir = Path(version_dir)
    meta = read_metadata(version_dir, fix)
    base = (meta or {}).get("base")
    if meta is not None:
        sha = base.get("sha256") if isinstance(base, dict) else None
        if sha != base_sha256:
            raise refuse(
                version_dir / METADATA_JSON,
                f"says the adapter was trained on a base with sha256 {str(sha)[:12]}…, not the served "
                f"{base_sha256[:12]}…",
                fix,
            )
        if arch is None and isinstance(base.get("arch"), str):
            arch = base["arch"]
    info = check_gguf_lora(version_dir / ADAPTER_GGUF, arch=arch, dims=dims, fix=fix)
    if peft:
        info["peft"] = check_peft_dir(version_dir, dims=dims, fix=fix)
    return info
