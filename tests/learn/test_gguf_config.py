"""The training base's config from the GGUF header equals transformers' own, key by key.

Real files: the bundled SmolLM2 (llama, ``llama.vocab_size`` in the header) and a tiny random
Qwen3 (no vocab size key: it comes from the token list's length, which the header reader counts
without reading the list).
"""

from __future__ import annotations

import dataclasses

import gguf
import pytest

from clawdesk.gguf.header import read_header
from clawdesk.learn.gguf_config import config_dict, config_of, name_maps_built_once
from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    return write_tiny_qwen3_gguf(tmp_path_factory.mktemp("gguf-config") / "tiny-qwen3.gguf")


@pytest.fixture(params=["demo", "tiny-qwen3"])
def gguf_file(request, demo_gguf, tiny_qwen3):
    return demo_gguf if request.param == "demo" else tiny_qwen3


def test_the_config_equals_transformers_own(gguf_file):
    from transformers import AutoConfig

    ours = config_of(gguf_file, read_header(gguf_file))
    theirs = AutoConfig.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    assert type(ours) is type(theirs)
    assert ours.to_dict() == theirs.to_dict()  # _name_or_path included: PEFT writes it as the base's name


def test_the_vocab_size_comes_from_the_token_list_when_no_key_says_it(tiny_qwen3):
    header = read_header(tiny_qwen3)
    assert "qwen3.vocab_size" not in header.fields and header.fields["tokenizer.ggml.tokens"] is None  # skipped
    n_tokens = len(gguf.GGUFReader(tiny_qwen3).fields["tokenizer.ggml.tokens"].data)
    assert header.array_lengths["tokenizer.ggml.tokens"] == n_tokens
    assert config_dict(header)["vocab_size"] == n_tokens


def test_what_the_legacy_reader_would_treat_otherwise_is_left_to_it(demo_gguf):
    header = read_header(demo_gguf)
    assert config_dict(header) is not None

    def changed(**fields):
        return dataclasses.replace(header, fields={**header.fields, **fields})

    assert config_dict(changed(**{"general.architecture": "gpt2"})) is None  # not an architecture we stream
    assert config_dict(changed(**{"general.name": "Mistral 7B"})) is None  # transformers calls it mistral
    assert config_dict(changed(**{"llama.context_length": None})) is None  # a mapped key holding an array
    untied = dataclasses.replace(
        header, tensors=[*header.tensors, dataclasses.replace(header.tensors[0], name="output.weight")]
    )
    assert config_dict(header)["tie_word_embeddings"] is True and config_dict(untied)["tie_word_embeddings"] is False


def test_name_maps_are_built_once_inside_and_the_original_is_back_after(tiny_qwen3):
    original = gguf.get_tensor_name_map
    with name_maps_built_once():
        first = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, 2)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, 2) is first
    assert gguf.get_tensor_name_map is original
    assert original(gguf.MODEL_ARCH.QWEN3, 2) is not first  # outside, a new map per call (the library's own)


def test_the_weights_map_is_the_same_with_the_maps_built_once(tiny_qwen3):
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor, get_gguf_hf_weights_map

    config = config_of(tiny_qwen3, read_header(tiny_qwen3))
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    processor = TENSOR_PROCESSORS.get("qwen3", TensorProcessor)(config=config.to_dict())
    plain = get_gguf_hf_weights_map(model, processor)
    with name_maps_built_once():
        assert get_gguf_hf_weights_map(model, processor) == plain and len(plain) > 10
