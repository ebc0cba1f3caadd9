"""Tool calls through `clawdesk serve`: the tiny random Qwen3 with Qwen3's real template and vocab.

The random model never calls a tool by itself, so the first request names the tool in
``tool_choice`` (the server then constrains the reply to one well-formed call, as it does for any
client that forces a call); everything else is the real template, tokenizer, llama.cpp and client.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from clawdesk.config import ChatConfig
from clawdesk.engine import Engine
from clawdesk.models import ResolvedModel
from clawdesk.testing.api_server import running_server
from clawdesk.testing.qwen3_assets import Qwen3AssetsError, qwen3_assets, write_real_qwen3_gguf

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The current time.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
]
USER = [{"role": "user", "content": "What time is it?"}]
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}
TOOL_RESPONSE = 151665  # Qwen3's <tool_response> token


@pytest.fixture(scope="module")
def qwen3_engine(tmp_path_factory):
    try:
        assets = qwen3_assets()
    except Qwen3AssetsError as exc:  # no registry: fail loudly, never skip
        pytest.fail(str(exc))
    path = write_real_qwen3_gguf(tmp_path_factory.mktemp("qwen3") / "tiny-real-qwen3.gguf", assets)
    eng = Engine.load(ResolvedModel(name="tiny-real-qwen3", path=path), sha256="test", n_ctx=2048, n_threads=1)
    yield eng
    eng.close()


@pytest.fixture
def server(qwen3_engine, config):
    cfg = dataclasses.replace(config, chat=ChatConfig(temperature=0.0, max_reply_tokens=40, thinking=False))
    with running_server(qwen3_engine, cfg) as srv:
        yield srv


def test_a_tool_call_round_trip(server, store, qwen3_engine):
    client = server.client()
    first = client.chat.completions.create(
        model="any",
        messages=USER,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        extra_body=NO_THINK,
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert (call.type, call.function.name, json.loads(call.function.arguments)) == ("function", "get_time", {})
    # The client runs the tool and sends the result back, with the whole conversation.
    result = "It is 12:34."
    messages = [
        *USER,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": result},
    ]
    second = client.chat.completions.create(
        model="any", messages=messages, tools=TOOLS, max_tokens=8, extra_body=NO_THINK
    )
    assert second.choices[0].finish_reason in ("stop", "length", "tool_calls")
    rows = store.db.execute("SELECT id, session_id, seq, user_content, reply_content FROM turns ORDER BY id").fetchall()
    assert [(r[1], r[2]) for r in rows] == [(rows[0][1], 1), (rows[0][1], 2)]  # one session
    assert "<tool_call>" in rows[0][4] and '"get_time"' in rows[0][4]  # the judge reads the call
    assert rows[1][3] == f"[tool result]\n{result}"  # the call's next state: what the tool gave back
    first_prompt, first_reply = store.turn_tokens(rows[0][0])
    second_prompt, _ = store.turn_tokens(rows[1][0])
    assert TOOL_RESPONSE not in first_prompt and second_prompt.count(TOOL_RESPONSE) == 1
    text = qwen3_engine.detokenize(second_prompt)
    assert f"<tool_response>\n{result}\n</tool_response>" in text
    # The first reply's call is rendered back into the second prompt as it was served.
    served = qwen3_engine.detokenize(first_reply)
    assert served[: served.index("</tool_call>") + len("</tool_call>")] in text


def test_a_streamed_tool_call_arrives_as_tool_calls_not_text(server):
    stream = server.client().chat.completions.create(
        model="any", messages=USER, tools=TOOLS, tool_choice="required", stream=True, extra_body=NO_THINK
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert "<tool_call" not in text
    assert [(tc.index, tc.function.name) for tc in calls] == [(0, "get_time")]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
