"""Qwen3's tool-call format: parsing ``<tool_call>`` blocks, the messages that answer them, and a
grammar-forced call on the bundled llama.cpp model (whose own template cannot render tools)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clawdesk.engine import SamplingParams
from clawdesk.engine.prompt import ChatTemplate, build_messages
from clawdesk.errors import ModelError
from clawdesk.tools.format import (
    CALL_FORM,
    CallError,
    assistant_message,
    parse_tool_calls,
    tool_call_grammar,
    tool_message,
)
from clawdesk.tools.types import ToolCall, ToolResult, ToolSpec

TIME_TOOL = ToolSpec("current_time", "The current local date and time.", {"type": "object", "properties": {}})


def block(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


def test_one_well_formed_call():
    raw = block('{"name": "read_file", "arguments": {"path": "notes/3.txt"}}')
    parsed = parse_tool_calls(raw)
    assert parsed.items == (ToolCall("read_file", {"path": "notes/3.txt"}, raw=raw),)
    assert parsed.content == "" and parsed.thinking == "" and not parsed.errors


def test_several_calls_keep_their_order_and_the_text_around_them():
    reply = (
        "Let me look.\n"
        + block('{"name": "list_files", "arguments": {}}')
        + "\n"
        + block('{"name": "read_file", "arguments": {"path": "a.txt"}}')
        + "\n"
        + block('{"name": "read_file", "arguments": {"path": "b.txt"}}')
    )
    parsed = parse_tool_calls(reply)
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        ("list_files", {}),
        ("read_file", {"path": "a.txt"}),
        ("read_file", {"path": "b.txt"}),
    ]
    assert parsed.content == "Let me look."


@pytest.mark.parametrize(
    ("body", "problem", "name"),
    [
        ('{"name": "read_file", "arguments": {"path": "a.txt"}', "JSON is invalid", ""),
        ("read_file(path='a.txt')", "JSON is invalid", ""),
        ('["read_file", {"path": "a.txt"}]', "one JSON object", ""),
        ('{"arguments": {"path": "a.txt"}}', 'no "name"', ""),
        ('{"name": "", "arguments": {}}', 'no "name"', ""),
        ('{"name": 7, "arguments": {}}', 'no "name"', ""),
        ('{"name": "read_file", "arguments": ["a.txt"]}', "must be a JSON object", "read_file"),
        ('{"name": "read_file", "arguments": "a.txt"}', "string that is not valid JSON", "read_file"),
        ('{"name": "read_file", "arguments": "[1, 2]"}', "must be a JSON object", "read_file"),
    ],
)
def test_a_malformed_block_becomes_an_error_the_model_can_read(body, problem, name):
    good = block('{"name": "current_time", "arguments": {}}')
    parsed = parse_tool_calls(good + "\n" + block(body))
    assert isinstance(parsed.items[0], ToolCall)  # the good call before it is kept, in place
    error = parsed.items[1]
    assert isinstance(error, CallError)
    assert problem in error.message and CALL_FORM in error.message and "tool call 2" in error.message
    assert error.name == name and error.raw == block(body)
    result = error.result()
    assert result.status == "error" and result.content == error.message
    assert parsed.content == ""


def test_an_unclosed_block_is_an_error_not_a_call():
    parsed = parse_tool_calls('Checking.\n<tool_call>\n{"name": "current_time", "arguments": {}}')
    assert not parsed.calls and len(parsed.errors) == 1
    assert "not closed" in parsed.errors[0].message
    assert parsed.content == "Checking."


def test_arguments_as_a_json_string_or_left_out_are_accepted():
    as_string = block(json.dumps({"name": "write_file", "arguments": json.dumps({"path": "x", "text": "hi"})}))
    left_out = block('{"name": "current_time"}')
    parsed = parse_tool_calls(as_string + left_out)
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        ("write_file", {"path": "x", "text": "hi"}),
        ("current_time", {}),
    ]


def test_calls_inside_the_thinking_are_ignored():
    reply = (
        "<think>\nMaybe " + block('{"name": "run_shell", "arguments": {"cmd": "rm -rf ~"}}') + "? No.\n</think>\n\n"
        "It is " + block('{"name": "current_time", "arguments": {}}')
    )
    parsed = parse_tool_calls(reply)
    assert [c.name for c in parsed.calls] == ["current_time"]
    assert "run_shell" in parsed.thinking and parsed.content == "It is"


def test_thinking_closed_without_its_opening_tag_and_unclosed_thinking():
    # Qwen3-2507's template puts "<think>\n" into the prompt, so the reply starts inside the thought.
    thought = "I need the time, not " + block('{"name": "run_shell"}') + "\n</think>\n\n"
    reply = thought + block('{"name": "current_time"}')
    parsed = parse_tool_calls(reply, started_in_thinking=True)
    assert parsed.thinking.startswith("I need the time") and [c.name for c in parsed.calls] == ["current_time"]
    # Otherwise a "</think>" that is not closing a leading thought is text (here: a file's content).
    write = block(json.dumps({"name": "write_file", "arguments": {"path": "a.md", "text": "x</think>y"}}))
    assert [c.name for c in parse_tool_calls(write).calls] == ["write_file"]
    cut = parse_tool_calls("<think>\nI will call " + block('{"name": "current_time", "arguments": {}}'))
    assert not cut.items and cut.content == ""


def test_a_closing_tag_inside_an_argument_string_does_not_cut_the_call():
    text = "The format is <tool_call>{...}</tool_call>, see?"
    raw = block(json.dumps({"name": "write_file", "arguments": {"path": "doc.md", "text": text}}))
    parsed = parse_tool_calls(raw + "\nDone.")
    assert parsed.calls == (ToolCall("write_file", {"path": "doc.md", "text": text}, raw=raw),)
    assert parsed.content == "Done."


def test_unicode_names_and_arguments_survive():
    raw = block('{"name": "remember", "arguments": {"note": "café ☕ \\u00e9t\\u00e9", "tags": ["日本"]}}')
    (call,) = parse_tool_calls(raw + "\nVoilà ✓").calls
    assert call.arguments == {"note": "café ☕ été", "tags": ["日本"]}
    assert parse_tool_calls(raw + "\nVoilà ✓").content == "Voilà ✓"


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_text_parses_without_raising(text):
    parsed = parse_tool_calls(text)
    assert len(parsed.items) <= text.count("<tool_call>")
    assert all(isinstance(item, ToolCall | CallError) for item in parsed.items)


names = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1).filter(lambda s: s.strip() == s)
values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(names, st.dictionaries(st.text(), values, max_size=4))
def test_a_call_written_the_way_the_template_writes_it_reads_back(name, arguments):
    # As the template writes it: '{"name": "' + name + '", "arguments": ' + (arguments | tojson) + '}'
    rendered = block(f'{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {json.dumps(arguments)}}}')
    assert parse_tool_calls(rendered).calls == (ToolCall(name, arguments, raw=rendered),)


def test_messages_have_the_shape_the_template_expects():
    only_calls = parse_tool_calls(block('{"name": "current_time", "arguments": {}}')).message()
    assert only_calls == {
        "role": "assistant",
        "content": "",  # never None: the template calls content.startswith
        "tool_calls": [{"type": "function", "function": {"name": "current_time", "arguments": {}}}],
    }
    assert assistant_message("Hi.") == {"role": "assistant", "content": "Hi."}
    assert tool_message(ToolResult("current_time", "ok", "2026-12-03 09:00")) == {
        "role": "tool",
        "name": "current_time",
        "content": "2026-12-03 09:00",
    }
    # A malformed block goes back verbatim so the model sees what its error result is about.
    bad = block('{"name": "read_file", "arguments": {')
    mixed = parse_tool_calls("Reading.\n" + bad).message()
    assert mixed["content"] == "Reading.\n" + bad and "tool_calls" not in mixed
    thought = parse_tool_calls("<think>\nhm\n</think>\n\n" + block('{"name": "x"}')).message(keep_thinking=True)
    assert thought["reasoning_content"] == "hm"


def test_supports_tools_reads_the_template_not_its_text():
    plain = "{# tools are not rendered here #}{% for m in messages %}{{ m.content }} tools{% endfor %}"
    with_tools = "{% if tools %}{{ tools | length }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}"
    assert not ChatTemplate(plain, bos_token="", eos_token="").supports_tools
    assert ChatTemplate(with_tools, bos_token="", eos_token="").supports_tools


def test_the_demo_models_template_cannot_render_tools(engine):
    assert engine.supports_tools is False
    messages = build_messages("", [], "What time is it?")
    with pytest.raises(ModelError, match="cannot render tools"):
        engine.render(messages, thinking=False, tools=[TIME_TOOL.schema()])
    # Without tools nothing changes: build_prompt with tools=None renders exactly as before.
    assert engine.build_prompt("", [], "What time is it?", thinking=False, reply_room=64, tools=None).text == (
        engine.render(messages, thinking=False)
    )


def test_a_grammar_forces_a_tool_call_on_the_real_demo_model(engine):
    prompt = engine.tokenize(
        engine.render(build_messages("You can call the tool current_time.", [], "What time is it?"), thinking=False)
    )
    params = SamplingParams(temperature=0.0, max_tokens=96)
    forced = engine.generate(prompt, params, grammar=tool_call_grammar(["current_time"], no_arguments=True))
    assert forced.status == "finished"  # the grammar ends, so the model can only end its turn
    assert forced.raw_text == block('{"name": "current_time", "arguments": {}}')
    assert parse_tool_calls(forced.raw_text).calls == (ToolCall("current_time", {}, raw=forced.raw_text),)
    # Free JSON arguments: whatever object the model writes, a call it finishes reads back well-formed.
    # (A sampled string can also run on past max_tokens: seed 7 did on an AVX2 llama.cpp build, not on a
    # native one. An unfinished call is no call, never a malformed one.)
    finished = 0
    for seed in range(7, 12):
        free = engine.generate(
            prompt,
            SamplingParams(temperature=0.8, max_tokens=96),
            grammar=tool_call_grammar(["current_time", "read_file"]),
            seed=seed,
        )
        calls = parse_tool_calls(free.raw_text).calls
        if free.status == "length":
            assert calls == (), free.raw_text
            continue
        finished += 1
        (call,) = calls
        assert call.name in ("current_time", "read_file") and isinstance(call.arguments, dict)
    assert finished >= 1
    # Without the grammar the demo model does not write a call by itself.
    unforced = engine.generate(prompt, SamplingParams(temperature=0.0, max_tokens=48))
    assert not parse_tool_calls(unforced.raw_text).has_calls
