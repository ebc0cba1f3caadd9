"""Does llama.cpp serve a trained adapter version as PEFT computes it? (tests and bench/gpu_check.py)

One check, shared by the CPU trainer test and the GPU check so both hold a written version to the
same bar. Logits of a probe sequence from transformers (fp32 on the CPU, whatever device trained the
adapter), without and with the PEFT adapter, and from llama.cpp (f32 KV cache), without and with the
version's GGUF LoRA. The adapter must move the last position's logits (``effect``), and llama.cpp
must move them the same way:

- float GGUF bases (f32/f16 weights, like the tiny Qwen3): llama.cpp's adapted logits within a
  fiftieth of that move of PEFT's (``gap``);
- quantized bases (Q4_0, Q8_0, ...): llama.cpp also quantizes activations there, so even the base
  logits differ by more than that (measured: 0.08 on a Q4_0 Qwen3-4B-shaped layer); the deltas
  (adapted − base) of the two stacks must correlate at >= 0.95 over every position (``delta_corr``),
  the bar tests/gguf/test_gguf_lora.py sets on the bundled Q4_1 SmolLM2 (measured there 0.98).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

EFFECT_MIN = 0.05  # max |logit change| the adapter must cause, or the comparison proves nothing
GAP_MAX_FRACTION = 1 / 50  # float bases: max |llama.cpp − PEFT| as a fraction of the effect
DELTA_CORR_MIN = 0.95  # quantized bases: correlation of the two stacks' logit deltas
PROBE_IDS = (5, 80, 200, 17, 33, 250, 9, 120)  # token ids valid in every model here (the tiny vocab has 283)


def _llama_cpp_logits(base_gguf: Path, ids: Sequence[int], lora: Path | None):
    import llama_cpp
    import numpy as np

    extra = {"lora_path": str(lora)} if lora is not None else {}
    llm = llama_cpp.Llama(
        model_path=str(base_gguf), n_ctx=64, n_threads=1, n_gpu_layers=0, logits_all=True, verbose=False,
        type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32, **extra,
    )  # fmt: skip
    try:
        llm.eval(list(ids))
        return np.array(llm.scores[: len(ids)], dtype=np.float64)  # (T, V)
    finally:
        llm.close()


def quantized_gguf(path: Path) -> bool:
    """Whether any weight matrix of the GGUF is stored in a quantized (not f32/f16/bf16) type."""
    import gguf

    from clawdesk.gguf.header import read_header

    floats = {gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16}
    return any(t.ggml_type not in floats for t in read_header(path).tensors if len(t.dims) > 1)


def llama_cpp_vs_peft(base_gguf: Path, version_dir: Path, ids: Sequence[int] = PROBE_IDS) -> dict[str, float | bool]:
    """Returns ``effect``, ``gap``, ``gap_fraction``, ``delta_corr``, ``quantized`` and ``passed``."""
    import numpy as np
    import torch
    from peft import PeftModel

    from clawdesk.learn.base_model import load_base
    from clawdesk.learn.versions import ADAPTER_GGUF

    base, _ = load_base(Path(base_gguf), device="cpu", load_in_4bit=False)
    with torch.no_grad():
        plain = base(input_ids=torch.tensor([list(ids)])).logits[0].double().numpy()  # (T, V)
        peft_model = PeftModel.from_pretrained(base, str(version_dir))
        adapted = peft_model(input_ids=torch.tensor([list(ids)])).logits[0].double().numpy()  # (T, V)
    served_plain = _llama_cpp_logits(Path(base_gguf), ids, None)  # (T, V)
    served = _llama_cpp_logits(Path(base_gguf), ids, Path(version_dir) / ADAPTER_GGUF)  # (T, V)
    effect = float(np.abs(adapted[-1] - plain[-1]).max())
    gap = float(np.abs(served[-1] - adapted[-1]).max())
    fraction = gap / effect if effect > 0 else float("inf")
    corr = float(np.corrcoef((adapted - plain).ravel(), (served - served_plain).ravel())[0, 1])
    quantized = quantized_gguf(Path(base_gguf))
    agrees = corr >= DELTA_CORR_MIN if quantized else fraction < GAP_MAX_FRACTION
    return {"effect": effect, "gap": gap, "gap_fraction": fraction, "delta_corr": corr, "quantized": quantized,
            "passed": effect > EFFECT_MIN and agrees}  # fmt: skip
