"""OpenAI's chat-completions shapes: reading a request body, writing replies, chunks and errors.

:func:`parse_request` validates a ``POST /v1/chat/completions`` body into a :class:`ChatRequest`
whose messages are what the GGUF's chat template renders (assistant ``tool_calls`` with their
arguments as objects, ``tool`` results, text-only content). Anything it cannot serve is an
:class:`ApiError`, answered in OpenAI's error JSON (``{"error": {"message", "type", "param",
"code"}}``), so a client's own error handling reads it.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from clawdesk.tools.types import ToolCall

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_STOPS = 4  # as OpenAI


class ApiError(Exception):
    """An error answered to the client as OpenAI's error JSON with ``status``."""

    def __init__(self, status: int, message: str, *, type_: str = "invalid_request_error", param=None, code=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


@dataclass(frozen=True)
class ChatRequest:
    """A validated chat-completions request (sampling fields None: ClawDesk's configured value)."""

    messages: list[dict[str, Any]]
    model: str = ""
    stream: bool = False
    include_usage: bool = False
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    thinking: bool | None = None  # chat_template_kwargs.enable_thinking, as vLLM and llama-server read it

    @property
    def forced_tools(self) -> list[str]:
        """Tool names the reply must call one of (``tool_choice`` "required" or a named function)."""
        if isinstance(self.tool_choice, dict):
            return [self.tool_choice["function"]["name"]]
        if self.tool_choice == "required":
            return [t["function"]["name"] for t in self.tools]
        return []

    @property
    def offered_tools(self) -> list[dict[str, Any]]:
        """The tools rendered into the prompt (none with ``tool_choice: "none"``)."""
        return [] if self.tool_choice == "none" else self.tools


def parse_request(data: Any) -> ChatRequest:
    if not isinstance(data, dict):
        raise bad("the request body must be a JSON object")
    raw_messages = data.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise bad("'messages' must be a non-empty array of chat messages", "messages")
    messages = [_message(m, i) for i, m in enumerate(raw_messages)]
    if messages[-1]["role"] == "assistant":
        raise bad("the last message must be from the user or a tool; continuing an assistant message is not supported")
    if not any(m["role"] in ("user", "tool") for m in messages):
        raise bad("'messages' has no user message", "messages")
    n = data.get("n", 1)
    if n not in (1, None):
        raise bad("only n = 1 is supported", "n")
    model = data.get("model") or ""
    if not isinstance(model, str):
        raise bad("'model' must be a string", "model")
    stream = _bool(data, "stream", False)
    options = data.get("stream_options") or {}
    if not isinstance(options, dict):
        raise bad("'stream_options' must be an object", "stream_options")
    tools = _tools(data.get("tools"))
    kwargs = data.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise bad("'chat_template_kwargs' must be an object", "chat_template_kwargs")
    thinking = kwargs.get("enable_thinking")
    if thinking is not None and not isinstance(thinking, bool):
        raise bad("'chat_template_kwargs.enable_thinking' must be true or false", "chat_template_kwargs")
    max_tokens = data.get("max_completion_tokens", data.get("max_tokens"))
    return ChatRequest(
        messages=messages,
        model=model,
        stream=stream,
        include_usage=bool(options.get("include_usage")),
        temperature=_number(data, "temperature", 0.0, 2.0),
        top_p=_number(data, "top_p", 0.0, 1.0),
        max_tokens=_max_tokens(max_tokens),
        stop=_stops(data.get("stop")),
        seed=_seed(data.get("seed")),
        tools=tools,
        tool_choice=_tool_choice(data.get("tool_choice"), tools),
        thinking=thinking,
    )


def _message(m: Any, i: int) -> dict[str, Any]:
    param = f"messages[{i}]"
    if not isinstance(m, dict):
        raise bad(f"{param} must be an object with 'role' and 'content'", param)
    role = m.get("role")
    if role not in ROLES:
        raise bad(f"{param}.role must be one of {', '.join(ROLES)} (got {role!r})", f"{param}.role")
    role = "system" if role == "developer" else role
    content = _text(m.get("content"), f"{param}.content", allow_none=role == "assistant")
    out: dict[str, Any] = {"role": role, "content": content}
    if role == "assistant":
        calls = m.get("tool_calls") or []
        if not isinstance(calls, list):
            raise bad(f"{param}.tool_calls must be an array", f"{param}.tool_calls")
        if calls:
            out["tool_calls"] = [_call_entry(c, f"{param}.tool_calls[{j}]") for j, c in enumerate(calls)]
        reasoning = m.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            out["reasoning_content"] = reasoning  # Qwen3's template replays it for steps after the user message
    return out


def _text(content: Any, param: str, *, allow_none: bool) -> str:
    if content is None and allow_none:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise bad(f"{param}: only text content parts are supported (got {kind!r})", param)
            parts.append(part["text"])
        return "".join(parts)
    raise bad(f"{param} must be a string or an array of text parts", param)


def _call_entry(c: Any, param: str) -> dict[str, Any]:
    fn = c.get("function") if isinstance(c, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise bad(f"{param} must be {{'type': 'function', 'function': {{'name': ..., 'arguments': ...}}}}", param)
    arguments = fn.get("arguments") or {}
    if isinstance(arguments, str):
        # The template renders an object; a string that is not JSON is passed on as written.
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(arguments) if arguments.strip() else {}
    return {"type": "function", "function": {"name": fn["name"], "arguments": arguments}}


def _tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise bad("'tools' must be an array", "tools")
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict):
            raise bad(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}", f"tools[{i}]")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise bad(f"tools[{i}].function.name must be a non-empty string", f"tools[{i}].function.name")
    return tools


def _tool_choice(choice: Any, tools: list[dict[str, Any]]) -> str | dict[str, Any]:
    if choice is None:
        return "auto"
    if choice in ("none", "auto", "required"):
        if choice == "required" and not tools:
            raise bad("tool_choice 'required' needs 'tools'", "tool_choice")
        return choice
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if not isinstance(name, str):
        raise bad("tool_choice must be 'none', 'auto', 'required' or {'type': 'function', ...}", "tool_choice")
    if name not in {t["function"]["name"] for t in tools}:
        raise bad(f"tool_choice names {name!r}, which is not in 'tools'", "tool_choice")
    return {"type": "function", "function": {"name": name}}


def _bool(data: dict, key: str, default: bool) -> bool:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad(f"'{key}' must be true or false", key)
    return value


def _number(data: dict, key: str, low: float, high: float) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise bad(f"'{key}' must be a number from {low:g} to {high:g} (got {value!r})", key)
    return float(value)


def _max_tokens(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad(f"'max_tokens' must be a positive integer (got {value!r})", "max_tokens")
    return value


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops) or len(stops) > MAX_STOPS:
        raise bad(f"'stop' must be a string or an array of up to {MAX_STOPS} strings", "stop")
    return tuple(s for s in stops if s)


def _seed(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(f"'seed' must be an integer (got {value!r})", "seed")
    return value & 0xFFFFFFFF  # llama.cpp takes a 32-bit seed


# -- replies ---------------------------------------------------------------------------------


def completion_id() -> str:
    return "chatcmpl-" + secrets.token_hex(12)


def tool_call_entries(calls: tuple[ToolCall, ...]) -> list[dict[str, Any]]:
    """``tool_calls`` of a reply, OpenAI's shape (arguments as a JSON string; ids made up: Qwen3 writes none)."""
    return [
        {
            "id": "call_" + secrets.token_hex(8),
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
        }
        for c in calls
    ]


@dataclass(frozen=True)
class Head:
    """What every reply object and chunk of one completion repeats."""

    id: str
    model: str
    fingerprint: str
    created: int = field(default_factory=lambda: int(time.time()))

    def base(self, obj: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
        }

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**self.base("chat.completion.chunk"), "choices": [choice]}

    def usage_chunk(self, usage: dict[str, int]) -> dict[str, Any]:
        return {**self.base("chat.completion.chunk"), "choices": [], "usage": usage}

    def completion(self, message: dict[str, Any], finish_reason: str, usage: dict[str, int]) -> dict[str, Any]:
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        return {**self.base("chat.completion"), "choices": [choice], "usage": usage}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def api_error(err: Exception) -> ApiError:
    """A ClawDesk error (already a complete message for a person) as the API answers it."""
    from clawdesk.errors import InputError, ModelError, NotFoundError

    message = str(err)
    if isinstance(err, NotFoundError):
        return ApiError(404, message, type_="not_found_error", code="not_found")
    if isinstance(err, InputError):
        code = "context_length_exceeded" if "context" in message else None
        return ApiError(400, message, code=code)
    if isinstance(err, ModelError):
        return ApiError(400, message, code="model_not_supported")
    return ApiError(500, message, type_="server_error")
