"""The one GGUF header reader (clawdesk/gguf/header.py) against gguf's own GGUFReader.

On the bundled demo model (metadata with a 49k-token vocabulary, quantized tensors) and on a GGUF
LoRA written by ClawDesk: every scalar field, every array (when asked for), every tensor's name,
dims, type and data offset must equal what ``gguf.GGUFReader`` reads; damaged files are refused
with a :class:`HeaderError` and truncated tensor data is reported, not read.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from clawdesk.gguf.header import HeaderError, read_header
from clawdesk.gguf.lora import write_gguf_lora


def _reference(path):
    reader = gguf.GGUFReader(path)
    fields = {name: field.contents() for name, field in reader.fields.items() if not name.startswith("GGUF.")}
    tensors = [(t.name, tuple(int(x) for x in t.shape), int(t.tensor_type), int(t.data_offset)) for t in reader.tensors]
    return fields, tensors


def _lora(tmp_path):
    rng = np.random.default_rng(0)
    state = {}
    for i in range(2):
        key = f"base_model.model.model.layers.{i}.self_attn.q_proj"
        state[f"{key}.lora_A.weight"] = rng.normal(size=(4, 64)).astype(np.float32)
        state[f"{key}.lora_B.weight"] = rng.normal(size=(64, 4)).astype(np.float32)
    return write_gguf_lora(state, tmp_path / "adapter.gguf", arch="llama", alpha=8, rank=4, n_head=2, n_head_kv=1)


@pytest.fixture(params=["demo", "lora"])
def gguf_file(request, demo_gguf, tmp_path):
    return demo_gguf if request.param == "demo" else _lora(tmp_path)


def test_fields_and_tensors_equal_gguf_readers(gguf_file):
    fields, tensors = _reference(gguf_file)
    header = read_header(gguf_file, arrays=True)
    assert header.fields.keys() == fields.keys()
    for key, value in fields.items():
        assert header.fields[key] == pytest.approx(value) if isinstance(value, float) else header.fields[key] == value
    got = [(t.name, t.dims, t.ggml_type, t.start) for t in header.tensors]
    assert got == tensors
    assert all(t.n_present == t.n_bytes > 0 for t in header.tensors)
    assert header.data_end <= header.file_size


def test_arrays_are_skipped_unless_asked(demo_gguf):
    header = read_header(demo_gguf)
    assert header.fields["tokenizer.ggml.tokens"] is None
    assert header.fields["general.architecture"] == "llama"  # strings and scalars are still read
    assert len(read_header(demo_gguf, arrays=True).fields["tokenizer.ggml.tokens"]) == 49152


def test_truncated_data_is_reported_per_tensor(tmp_path):
    path = _lora(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    header = read_header(path)
    short = [t for t in header.tensors if t.n_present < t.n_bytes]
    assert len(short) == 1 and short[0].n_present == short[0].n_bytes - 100
    assert header.data_end > header.file_size


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:20], "too short"),
        (lambda b: b"GGML" + b[4:], "no GGUF magic"),
        (lambda b: b[:4] + (99).to_bytes(4, "little") + b[8:], "version 99"),
        (lambda b: b[:8] + (2**40).to_bytes(8, "little") + b[16:], "claims"),
        (lambda b: b[:200], "past the end"),
    ],
)
def test_damaged_headers_raise_header_error(tmp_path, damage, message):
    path = _lora(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(HeaderError, match=message):
        read_header(path)
