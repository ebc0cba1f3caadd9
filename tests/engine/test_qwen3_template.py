"""Tools through Qwen3's REAL chat template and tokenizer, on a real llama.cpp engine.

The template and the vocab-only GGUF come from llama-cpp-python's sdist on the package registry
(fetched once into the test cache, see clawdesk/testing/qwen3_assets.py); the model is the tiny
random Qwen3 built with them. What is checked is what Qwen3-4B will see: the tools block, calls and
results rendered by the template, and the special tokens the prompt is tokenized into.
"""

from __future__ import annotations

import json

import pytest

from clawdesk.engine import Engine, SamplingParams
from clawdesk.engine.prompt import Exchange, build_messages
from clawdesk.models import ResolvedModel
from clawdesk.testing.qwen3_assets import Qwen3AssetsError, qwen3_assets, write_real_qwen3_gguf
from clawdesk.testing.tiny_qwen3 import QWEN3_ADDED_TOKENS, qwen3_vocab
from clawdesk.tools.format import parse_tool_calls, tool_call_grammar, tool_messages
from clawdesk.tools.types import ToolCall, ToolResult, ToolSpec

TOOLS = [
    ToolSpec("current_time", "The current local date and time.", {"type": "object", "properties": {}}),
    ToolSpec(
        "read_file",
        "Read a text file in the workspace — UTF-8, at most 64 KiB.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    ),
]
SYSTEM = "You are ClawDesk."
USER = "What time is it, and what is in notes/3.txt?"
CALLS = (
    '<tool_call>\n{"name": "current_time", "arguments": {}}\n</tool_call>\n'
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "notes/3.txt"}}\n</tool_call>'
)
RESULTS = [ToolResult("current_time", "ok", "2026-12-03 09:00"), ToolResult("read_file", "ok", "Homework 3: café ☕")]

# The Qwen3 ids of its tool and thinking tokens (tokenizer_config.json ``added_tokens_decoder``).
TOOL_CALL, TOOL_CALL_END, TOOL_RESPONSE, TOOL_RESPONSE_END, THINK, THINK_END = (
    151657,
    151658,
    151665,
    151666,
    151667,
    151668,
)
IM_START, IM_END = 151644, 151645


@pytest.fixture(scope="module")
def assets():
    try:
        return qwen3_assets()
    except Qwen3AssetsError as exc:  # no registry: fail loudly, never skip
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def qwen3(assets, tmp_path_factory):
    path = write_real_qwen3_gguf(tmp_path_factory.mktemp("qwen3") / "tiny-real-qwen3.gguf", assets)
    eng = Engine.load(ResolvedModel(name="tiny-real-qwen3", path=path), sha256="test", n_ctx=2048, n_threads=1)
    yield eng
    eng.close()


def test_the_vocab_is_qwen3s_with_its_added_tokens(assets):
    tokens, types, merges = qwen3_vocab(assets.vocab_path)
    assert len(tokens) == 151_936 and len(merges) > 150_000
    assert tokens[151643:151646] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert all(tokens[i] == text for i, text in QWEN3_ADDED_TOKENS.items())
    assert types[TOOL_CALL] == types[THINK] == 4 and types[IM_START] == 3  # USER_DEFINED, CONTROL
    assert tokens[151669] == "[PAD151669]"  # beyond Qwen3's added tokens, placeholders stay


def test_tools_render_as_the_qwen3_tools_block(qwen3):
    assert qwen3.supports_tools and qwen3.supports_thinking
    text = qwen3.render(build_messages(SYSTEM, [], USER), thinking=False, tools=[t.schema() for t in TOOLS])
    head = (
        f"<|im_start|>system\n{SYSTEM}\n\n# Tools\n\nYou may call one or more functions to assist with the user "
        "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    )
    assert text.startswith(head)
    listed, _, after = text[len(head) :].partition("\n</tools>")
    assert [json.loads(line) for line in listed.split("\n")] == [t.schema() for t in TOOLS]  # one JSON per tool
    assert "— UTF-8" in listed  # tojson keeps unicode, as transformers does
    assert after.startswith("\n\nFor each function call, return a json object with function name and arguments")
    assert after.endswith(
        f"</tool_call><|im_end|>\n<|im_start|>user\n{USER}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    # Without tools the same template renders a plain system turn.
    plain = qwen3.render(build_messages(SYSTEM, [], USER), thinking=False)
    assert plain.startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n") and "# Tools" not in plain


def test_calls_and_results_render_as_the_template_does_and_the_reply_comes_back_verbatim(qwen3):
    reply = "<think>\nTwo tools are needed.\n</think>\n\n" + CALLS
    parsed = parse_tool_calls(reply)
    steps = [parsed.message(keep_thinking=True), *tool_messages(RESULTS)]
    text = qwen3.render(build_messages(SYSTEM, [Exchange("Hi", "Hello!")], USER, steps), thinking=True)
    assert text == (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
        f"<|im_start|>user\n{USER}<|im_end|>\n"
        # The step's own reply, byte for byte as the model wrote it (so its KV cache prefix is reused).
        f"<|im_start|>assistant\n{reply}<|im_end|>\n"
        # One user turn holds all results, in the order of the calls (there is no call id).
        "<|im_start|>user\n<tool_response>\n2026-12-03 09:00\n</tool_response>\n"
        "<tool_response>\nHomework 3: café ☕\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    # Text before the calls, and calls given with arguments as a JSON string, as the template allows.
    said = parse_tool_calls("Let me check.\n" + CALLS).message()
    said["tool_calls"][1]["function"]["arguments"] = '{"path": "notes/3.txt"}'
    again = qwen3.render(build_messages("", [], USER, [said, *tool_messages(RESULTS)]), thinking=False)
    assert f"<|im_start|>assistant\nLet me check.\n{CALLS}<|im_end|>\n" in again


def test_the_prompt_tokenizes_tool_and_think_markers_into_single_qwen3_tokens(qwen3):
    steps = [parse_tool_calls(CALLS).message(), *tool_messages(RESULTS)]
    prompt = qwen3.build_prompt(
        SYSTEM, [], USER, thinking=False, reply_room=64, tools=[t.schema() for t in TOOLS], steps=steps
    )
    ids = prompt.token_ids
    assert ids == qwen3.tokenize(prompt.text)
    text = prompt.text
    for marker, token in [
        ("<tool_call>", TOOL_CALL),
        ("</tool_call>", TOOL_CALL_END),
        ("<tool_response>", TOOL_RESPONSE),
        ("</tool_response>", TOOL_RESPONSE_END),
        ("<think>", THINK),
        ("</think>", THINK_END),
        ("<|im_start|>", IM_START),
        ("<|im_end|>", IM_END),
    ]:
        assert ids.count(token) == text.count(marker) > 0, marker
    assert qwen3.tokenize_plain("Hello world") == [9707, 1879]  # Qwen2/3's BPE ids for these words
    assert qwen3.llm.detokenize(ids, special=True).decode() == text


def test_build_prompt_drops_old_history_but_never_the_steps(qwen3):
    steps = [parse_tool_calls(CALLS).message(), *tool_messages(RESULTS)]
    history = [Exchange(f"Question {i}: " + "word " * 60, "Answer " * 60) for i in range(30)]
    tools = [t.schema() for t in TOOLS]
    prompt = qwen3.build_prompt(SYSTEM, history, USER, thinking=False, reply_room=256, tools=tools, steps=steps)
    assert 0 < prompt.dropped_turns < len(history)
    assert prompt.text.count("<tool_response>") == 2 and "# Tools" in prompt.text
    assert len(prompt.token_ids) <= qwen3.n_ctx - 256


def test_a_grammar_forced_call_on_the_real_vocab_reads_back(qwen3):
    prompt = qwen3.build_prompt(SYSTEM, [], USER, thinking=False, reply_room=64, tools=[t.schema() for t in TOOLS])
    grammar = tool_call_grammar([t.name for t in TOOLS], no_arguments=True)
    reply = qwen3.generate(prompt.token_ids, SamplingParams(temperature=0.0, max_tokens=64), grammar=grammar)
    (call,) = parse_tool_calls(reply.raw_text).calls
    assert call in (ToolCall("current_time", {}, raw=reply.raw_text), ToolCall("read_file", {}, raw=reply.raw_text))
