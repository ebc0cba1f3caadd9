"""The streamed GGUF loader gives transformers' own GGUF load exactly, in less memory.

Real files only: the bundled SmolLM2 (llama: q/k are reverse-permuted on the way in), tiny random
Qwen3 GGUFs in f32, Q8_0 and Q4_0, and a medium one for the memory comparison in child processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from clawdesk.config import TrainConfig, load_config
from clawdesk.errors import ConfigError, TrainError
from clawdesk.learn import base_model, gguf_weights
from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

IDS = torch.tensor([[5, 80, 200, 17, 3, 99, 120, 42]])


def _transformers_load(path: Path, dtype=torch.float32):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)


def _assert_same_model(ours, theirs) -> None:
    a, b = ours.state_dict(), theirs.state_dict()
    assert sorted(a) == sorted(b)
    unequal = [k for k in a if a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k])]
    assert unequal == []
    assert (ours.lm_head.weight is ours.model.embed_tokens.weight) == (
        theirs.lm_head.weight is theirs.model.embed_tokens.weight
    )
    with torch.no_grad():
        assert torch.equal(ours(IDS).logits, theirs(IDS).logits)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny")
    return {q: write_tiny_qwen3_gguf(root / f"tiny-{q}.gguf", seed=3, qtype=q) for q in ("F32", "Q8_0", "Q4_0")}


@pytest.mark.parametrize("qtype", ["F32", "Q8_0", "Q4_0"])
def test_streamed_tiny_qwen3_equals_transformers(tiny, qtype):
    ours = gguf_weights.load_streamed(tiny[qtype], "qwen3", torch.float32)
    _assert_same_model(ours, _transformers_load(tiny[qtype]))
    assert ours.config.tie_word_embeddings and ours.lm_head.weight is ours.model.embed_tokens.weight


@pytest.mark.slow  # two full loads of the 135M demo model (~30 s each on 2 busy cores)
def test_streamed_demo_llama_equals_transformers(demo_gguf):
    import gguf

    ours = gguf_weights.load_streamed(demo_gguf, "llama", torch.float32)
    _assert_same_model(ours, _transformers_load(demo_gguf))
    # The llama reverse permutation really ran: the stored q differs from the plain dequantized one.
    raw = next(t for t in gguf.GGUFReader(demo_gguf).tensors if t.name == "blk.0.attn_q.weight")
    plain = torch.from_numpy(gguf.quants.dequantize(raw.data, raw.tensor_type).copy())
    assert not torch.equal(ours.model.layers[0].self_attn.q_proj.weight, plain)


def test_bf16_is_transformers_bf16_and_close_to_fp32(tiny):
    path = tiny["Q8_0"]
    ours = gguf_weights.load_streamed(path, "qwen3", torch.bfloat16)
    assert {p.dtype for p in ours.parameters()} == {torch.bfloat16}
    _assert_same_model(ours, _transformers_load(path, torch.bfloat16))
    with torch.no_grad():
        full = gguf_weights.load_streamed(path, "qwen3", torch.float32)(IDS).logits
        half = ours(IDS).logits.float()
    # bf16 keeps 8 bits of mantissa: logits of std ~1 move by a few 1e-2 through two layers.
    assert (half - full).abs().max() < 0.1
    assert not torch.equal(half, full)


def test_4bit_layers_are_quantized_as_they_land_like_the_whole_model(tiny):
    import bitsandbytes as bnb

    path = tiny["Q4_0"]
    ours, info = base_model.load_base(path, device="cpu", load_in_4bit=True, base_dtype="float32")
    whole = _transformers_load(path)
    base_model._to_nf4(whole, "cpu", torch.float32)  # the old way: full-precision model first
    assert info.quantized and ours.is_loaded_in_4bit
    mine = {n: m for n, m in ours.named_modules() if isinstance(m, bnb.nn.Linear4bit)}
    theirs = {n: m for n, m in whole.named_modules() if isinstance(m, bnb.nn.Linear4bit)}
    assert len(mine) == 2 * 7 and sorted(mine) == sorted(theirs)
    for name, module in mine.items():
        assert torch.equal(module.weight.data, theirs[name].weight.data), name
        assert torch.equal(module.weight.quant_state.absmax, theirs[name].weight.quant_state.absmax), name
        assert module.support_avx512bf16_for_cpu is False  # the CPU repacking guard reached every layer
    with torch.no_grad():
        assert torch.equal(ours(IDS).logits, whole(IDS).logits)


def test_tensor_table_matches_gguf_reader(tiny):
    import gguf

    path = tiny["Q4_0"]
    reader = gguf.GGUFReader(path)
    table = gguf_weights.read_tensor_table(path)
    assert [(e.name, e.shape, e.qtype, e.start) for e in table] == [
        (t.name, tuple(int(d) for d in reversed(t.shape)), int(t.tensor_type), int(t.data_offset))
        for t in reader.tensors
    ]
    assert gguf_weights.gguf_param_count(path) == sum(int(t.n_elements) for t in reader.tensors)


def test_auto_dtype_follows_available_ram(tiny, monkeypatch):
    n = gguf_weights.gguf_param_count(tiny["F32"])
    monkeypatch.setattr(base_model, "_available_ram", lambda: 8 * n)  # fp32 weights = half of it: still fp32
    assert base_model.load_base(tiny["F32"], device="cpu")[1].dtype == "float32"
    monkeypatch.setattr(base_model, "_available_ram", lambda: 8 * n - 1)
    model, info = base_model.load_base(tiny["F32"], device="cpu")
    assert info.dtype == "bfloat16" and {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert base_model.load_base(tiny["F32"], device="cpu", base_dtype="float32")[1].dtype == "float32"


def test_auto_4bit_on_a_cpu_where_a_bf16_step_would_not_fit(tiny, monkeypatch):
    n = gguf_weights.gguf_param_count(tiny["F32"])
    step = base_model.BF16_STEP_BYTES_PER_WEIGHT * n  # the measured bf16 step peak for this model
    monkeypatch.setattr(base_model, "_available_ram", lambda: int(2.2 * step))  # under half of it: no 4-bit
    assert not base_model.load_base(tiny["F32"], device="cpu")[1].quantized
    monkeypatch.setattr(base_model, "_available_ram", lambda: int(1.8 * step))
    assert base_model.load_base(tiny["F32"], device="cpu")[1].quantized
    assert not base_model.load_base(tiny["F32"], device="cpu", load_in_4bit=False)[1].quantized
    # Plenty of RAM, but the step would exceed the budget (a 4B model: 10.5 GB > 8 GB): NF4 in bf16.
    monkeypatch.setattr(base_model, "_available_ram", lambda: int(100 * step))
    monkeypatch.setattr(base_model, "CPU_STEP_RAM_BUDGET", int(0.9 * step))
    info = base_model.load_base(tiny["F32"], device="cpu")[1]
    assert info.quantized and info.dtype == "bfloat16"
    monkeypatch.setattr(base_model, "CPU_STEP_RAM_BUDGET", int(1.1 * step))
    assert base_model.load_base(tiny["F32"], device="cpu")[1].dtype == "float32"  # fits: fp32, not NF4


def test_choose_dtype_and_config_validation(tmp_path):
    assert gguf_weights.choose_dtype("bfloat16", n_params=1, available_bytes=10**12) == torch.bfloat16
    assert gguf_weights.choose_dtype("float32", n_params=10**12, available_bytes=1) == torch.float32
    assert gguf_weights.choose_dtype("auto", n_params=4_000_000_000, available_bytes=24 << 30) == torch.bfloat16
    assert gguf_weights.choose_dtype("auto", n_params=135_000_000, available_bytes=4 << 30) == torch.float32
    with pytest.raises(TrainError, match="base_dtype"):
        gguf_weights.choose_dtype("fp16", n_params=1, available_bytes=1)
    assert TrainConfig().base_dtype == "auto"
    (tmp_path / "config.toml").write_text('[train]\nbase_dtype = "bfloat16"\n')
    assert load_config(tmp_path).train.base_dtype == "bfloat16"
    (tmp_path / "config.toml").write_text('[train]\nbase_dtype = "float16"\n')
    with pytest.raises(ConfigError, match="base_dtype"):
        load_config(tmp_path)


def test_truncated_file_is_a_train_error_naming_it(tiny, tmp_path):
    cut = tmp_path / "cut.gguf"
    data = tiny["Q8_0"].read_bytes()
    cut.write_bytes(data[: len(data) - 4096])
    with pytest.raises(TrainError, match=r"cut\.gguf"):
        gguf_weights.load_streamed(cut, "qwen3", torch.float32)


# -- memory: each load in its own process, so ru_maxrss (which only grows) is its own ------------------

_CHILD = r"""
import json, sys, torch
from pathlib import Path
from transformers import AutoConfig, AutoModelForCausalLM
import bitsandbytes  # imported before the baseline: imports are not the load
from clawdesk.learn import base_model
path, mode = Path(sys.argv[1]), sys.argv[2]
AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)  # imports and config parsing: not the load
# VmHWM: ru_maxrss would start at the pytest parent's peak (Linux keeps it across fork and exec).
peak = lambda: int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024
before = peak()
if mode == "transformers":
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
else:
    model, _ = base_model.load_base(path, device="cpu", load_in_4bit=mode == "nf4", base_dtype="float32")
print(json.dumps({"load_mb": peak() - before}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmHWM from /proc")
@pytest.mark.slow  # writes a 130 MB GGUF and loads it in three processes (~40 s on 2 busy cores)
def test_streamed_peak_rss_is_below_transformers(tmp_path):
    path = write_tiny_qwen3_gguf(
        tmp_path / "medium.gguf", hidden=1024, n_head=8, n_head_kv=2, ffn=4096, n_layers=8, qtype="Q8_0"
    )
    fp32_mb = 4 * gguf_weights.gguf_param_count(path) / 2**20  # ~460 MB
    file_mb = path.stat().st_size / 2**20  # ~124 MB
    peak = {}
    for mode in ("transformers", "fp32", "nf4"):
        out = subprocess.run([sys.executable, "-c", _CHILD, str(path), mode], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        peak[mode] = json.loads(out.stdout.strip().splitlines()[-1])["load_mb"]
    # transformers holds the fp32 model plus the file's mapped pages and a dequantized tensor or more.
    assert peak["transformers"] > fp32_mb
    # Ours never maps the file and frees each tensor's float copy: below transformers by most of the file.
    assert peak["fp32"] < peak["transformers"] - file_mb / 2, peak
    # NF4 (0.5 byte + stats per weight) as each layer lands: the fp32 model never exists.
    assert peak["nf4"] < 0.5 * peak["transformers"], peak
