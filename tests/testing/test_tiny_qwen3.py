"""The tiny random Qwen3 GGUF loads in llama.cpp and transformers, and both read it the same way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from clawdesk.engine.prompt import ChatTemplate
from clawdesk.testing.tiny_qwen3 import HEAD_DIM, tiny_vocab, write_tiny_qwen3_gguf

# Measured: max |logit difference| between llama.cpp (f32 weights, f32 KV cache) and transformers on
# the same ids is ~3e-6, with logits of std ~1. f16 KV would give ~4e-3 (FIELD-NOTES).
LOGITS_ATOL = 1e-4

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi! Is the café open?"},
    {"role": "assistant", "content": "<think>\nThey ask about hours.\n</think>\n\nYes, until 9."},
    {"role": "user", "content": "And the assistant, is she there?\n\nThanks ☕"},
]


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory) -> Path:
    return write_tiny_qwen3_gguf(tmp_path_factory.mktemp("tiny") / "tiny-qwen3.gguf")


@pytest.fixture(scope="module")
def llm(tiny_path):
    import llama_cpp

    model = llama_cpp.Llama(
        model_path=str(tiny_path),
        n_ctx=256,
        n_threads=1,
        verbose=False,
        logits_all=True,
        type_k=llama_cpp.GGML_TYPE_F32,
        type_v=llama_cpp.GGML_TYPE_F32,
    )
    yield model
    model.close()


@pytest.fixture(scope="module")
def hf(tiny_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_path.parent, gguf_file=tiny_path.name)
    model = AutoModelForCausalLM.from_pretrained(tiny_path.parent, gguf_file=tiny_path.name, dtype=torch.float32)
    return model.eval(), tokenizer


def test_file_is_small_deterministic_and_seeded(tmp_path):
    a = write_tiny_qwen3_gguf(tmp_path / "a.gguf", seed=3)
    b = write_tiny_qwen3_gguf(tmp_path / "b.gguf", seed=3)
    c = write_tiny_qwen3_gguf(tmp_path / "c.gguf", seed=4)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    assert a.stat().st_size < 5 * 2**20


def test_llama_cpp_reads_qwen3_shape_and_special_ids(llm):
    tokens, _, _ = tiny_vocab()
    meta = llm.metadata
    assert meta["general.architecture"] == "qwen3"
    assert int(meta["qwen3.attention.key_length"]) == HEAD_DIM
    assert llm.n_vocab() == len(tokens)
    assert llm.token_eos() == tokens.index("<|im_end|>")
    assert llm.token_bos() == tokens.index("<|endoftext|>")


def test_llama_cpp_tokenizer_round_trips_and_keeps_special_tokens_whole(llm):
    text = "Hello there, the user is in the café ☕!\n\n  x\tz"
    ids = llm.tokenize(text.encode(), add_bos=True, special=False)
    assert llm.detokenize(ids).decode() == text
    assert len(ids) < len(text.encode())  # the merges are used, not bytes only
    assert len(llm.tokenize(b"<|im_start|>", add_bos=False, special=True)) == 1
    assert len(llm.tokenize(b"<|im_start|>", add_bos=False, special=False)) > 1  # control: only when asked
    # <think> is a user-defined token, as in real Qwen3: whole even when special parsing is off.
    assert llm.tokenize(b"<think>", add_bos=False, special=False) == [tiny_vocab()[0].index("<think>")]


def test_chat_template_switches_thinking_and_drops_earlier_thoughts(llm, hf):
    _, tokenizer = hf
    ours = ChatTemplate(llm.metadata["tokenizer.chat_template"], bos_token="<|endoftext|>", eos_token="<|im_end|>")
    assert ours.supports_thinking
    off = ours.render(MESSAGES, thinking=False)
    on = ours.render(MESSAGES, thinking=True)
    assert off.endswith("<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert "<|im_start|>assistant\nYes, until 9.<|im_end|>\n" in on
    assert "hours" not in on
    assert on.startswith("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!")
    for thinking, text in ((False, off), (True, on)):
        hf_text = tokenizer.apply_chat_template(
            MESSAGES, tokenize=False, add_generation_prompt=True, enable_thinking=thinking
        )
        assert hf_text == text


def test_transformers_tokenizes_the_chat_like_llama_cpp(llm, hf):
    _, tokenizer = hf
    text = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    ids = llm.tokenize(text.encode(), add_bos=True, special=True)  # add_bos is a no-op: the file says no BOS
    assert tokenizer(text)["input_ids"] == ids
    assert ids[0] == tiny_vocab()[0].index("<|im_start|>")


def test_logits_and_greedy_tokens_agree_between_llama_cpp_and_transformers(llm, hf):
    import torch

    model, tokenizer = hf
    text = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    ids = llm.tokenize(text.encode(), add_bos=False, special=True)

    llm.reset()
    llm.eval(ids)
    ours = np.array(llm.scores[: len(ids)])  # (T, V)
    with torch.no_grad():
        theirs = model(torch.tensor([ids])).logits[0].numpy()  # (T, V)
    assert ours.shape == theirs.shape
    assert theirs.std() > 0.5  # logits are O(1), so the tolerance below is a real bound
    assert np.abs(ours - theirs).max() < LOGITS_ATOL

    llm.reset()
    generated = []
    for token in llm.generate(ids, temp=0.0):
        generated.append(token)
        if len(generated) == 4:
            break
    expected, context = [], list(ids)
    with torch.no_grad():
        for _ in range(4):
            expected.append(int(model(torch.tensor([context])).logits[0, -1].argmax()))
            context.append(expected[-1])
    assert generated == expected
