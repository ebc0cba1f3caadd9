"""Qwen3's tool-call chat format: reading ``<tool_call>`` blocks from a reply, and the messages that answer them.

Qwen3 (the Hermes format) writes each call as ``<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>``
after its thinking; the chat template renders tools, an assistant message's ``tool_calls`` and role
``"tool"`` results itself (see FIELD-NOTES "Tool calling with Qwen3"). This module owns the text side:

* :func:`parse_tool_calls` splits a raw reply into thinking, visible text and the calls in order. A block
  the model got wrong becomes a :class:`CallError` in its place, never an exception: the agent loop
  answers it with an error result the model can read and fix.
* :func:`assistant_message` / :func:`tool_message` build the message dicts the template expects.
* :func:`tool_call_grammar` is a GBNF grammar that forces one well-formed call (tests; small models).

It knows nothing of the registry: whether a name is a known tool, or the arguments fit its schema,
is decided by whoever runs the call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clawdesk.tools.types import ToolCall, ToolResult

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
# The form the Qwen3 template asks for, quoted back to the model in error results.
CALL_FORM = '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'

_SNIPPET = 80  # characters of a bad block quoted in its error message


@dataclass(frozen=True)
class CallError:
    """A ``<tool_call>`` block that could not be read as a call, in the position the model wrote it."""

    raw: str  # the block as written, tags included
    message: str  # what is wrong, written for the model to read
    name: str = ""  # the tool name when it could be read (the arguments were the problem)

    def result(self) -> ToolResult:
        """The error result the agent loop sends back for this block (the model reads it and retries)."""
        return ToolResult(name=self.name or "?", status="error", content=self.message)


@dataclass(frozen=True)
class ParsedReply:
    """A model reply split into thinking, the visible text, and its calls in the order written."""

    thinking: str
    content: str  # after any </think>, without the <tool_call> blocks
    items: tuple[ToolCall | CallError, ...]  # one per <tool_call> block, in order

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        return tuple(item for item in self.items if isinstance(item, ToolCall))

    @property
    def errors(self) -> tuple[CallError, ...]:
        return tuple(item for item in self.items if isinstance(item, CallError))

    @property
    def has_calls(self) -> bool:
        """Whether the model asked for anything (a malformed block counts: it must be answered)."""
        return bool(self.items)

    def message(self, *, keep_thinking: bool = False) -> dict[str, Any]:
        """The assistant message for the next step's prompt.

        Well-formed calls go in ``tool_calls`` (the template re-renders them in canonical form); a
        malformed block is appended to the content verbatim, so the model sees what its error result
        is about.
        """
        content = "\n".join([self.content, *(error.raw for error in self.errors)]).strip()
        thinking = self.thinking if keep_thinking and self.thinking else None
        return assistant_message(content, self.calls, thinking=thinking)


def split_reply_thinking(reply: str, *, started_in_thinking: bool = False) -> tuple[str, str]:
    """(thinking, rest) of a raw reply.

    Thinking is a leading ``<think>`` block, as :func:`clawdesk.engine.prompt.split_thinking` reads it;
    ``started_in_thinking`` is for templates whose prompt already ends in ``<think>\\n`` (Qwen3-2507),
    where the reply starts mid-thought. Otherwise a ``</think>`` later in the reply (say, in a file
    being written) is text, not the end of a thought. An unclosed thought (cut short) is all thinking.
    """
    body = reply.lstrip()
    if body.startswith(THINK_OPEN):
        body = body[len(THINK_OPEN) :]
    elif not started_in_thinking:
        return "", reply
    thought, closed, rest = body.partition(THINK_CLOSE)
    return thought.strip(), rest if closed else ""


def parse_tool_calls(reply: str, *, started_in_thinking: bool = False) -> ParsedReply:
    """Read the ``<tool_call>`` blocks of a raw reply (never raises).

    Blocks inside the thinking are ignored: the model is only thinking about a call there. A
    ``<tool_call>`` never closed (the reply was cut, or the model stopped early) is a malformed block.
    A block ends after its JSON object, so ``</tool_call>`` inside a JSON string (a file being
    written that quotes the format) does not cut it short.
    """
    thinking, rest = split_reply_thinking(reply, started_in_thinking=started_in_thinking)
    items: list[ToolCall | CallError] = []
    kept: list[str] = []  # text pieces of the content
    pos = 0
    while (start := rest.find(CALL_OPEN, pos)) >= 0:
        kept.append(rest[pos:start])
        body_at = start + len(CALL_OPEN)
        end = _json_block_end(rest, body_at)
        if end is None:
            close = rest.find(CALL_CLOSE, body_at)
            if close < 0:
                raw = rest[start:]
                items.append(
                    CallError(raw=raw, message=_error(len(items) + 1, raw, f"it was not closed with {CALL_CLOSE}"))
                )
                pos = len(rest)
                break
            end = close + len(CALL_CLOSE)
        items.append(_read_block(rest[start:end], rest[body_at : end - len(CALL_CLOSE)], len(items) + 1))
        pos = end
    kept.append(rest[pos:])
    content = re.sub(r"\n{3,}", "\n\n", "".join(kept)).strip()
    return ParsedReply(thinking=thinking, content=content, items=tuple(items))


_DECODER = json.JSONDecoder()


def _json_block_end(text: str, at: int) -> int | None:
    """Where a block ends when a JSON value starts at ``at`` and ``</tool_call>`` follows it (else None)."""
    start = len(text) - len(text[at:].lstrip())
    try:
        _, end = _DECODER.raw_decode(text, start)
    except json.JSONDecodeError:
        return None
    close = len(text) - len(text[end:].lstrip())
    return close + len(CALL_CLOSE) if text.startswith(CALL_CLOSE, close) else None


def _read_block(raw: str, body: str, number: int) -> ToolCall | CallError:
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        return CallError(raw=raw, message=_error(number, raw, f"the JSON is invalid ({exc.msg} at column {exc.colno})"))
    if not isinstance(data, dict):
        return CallError(raw=raw, message=_error(number, raw, "the block must hold one JSON object"))
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        return CallError(raw=raw, message=_error(number, raw, 'it has no "name" string'))
    name = name.strip()
    arguments = data.get("arguments")
    if arguments is None:
        arguments = {}  # a call without parameters; Qwen3 writes {} but some models leave it out
    elif isinstance(arguments, str):
        # The template accepts arguments as a JSON string holding the object; so do we.
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return CallError(
                raw=raw,
                name=name,
                message=_error(number, raw, f'"arguments" is a string that is not valid JSON ({exc.msg})'),
            )
    if not isinstance(arguments, dict):
        return CallError(
            raw=raw, name=name, message=_error(number, raw, '"arguments" must be a JSON object of parameter values')
        )
    return ToolCall(name=name, arguments=arguments, raw=raw)


def _error(number: int, raw: str, problem: str) -> str:
    snippet = raw if len(raw) <= _SNIPPET else raw[: _SNIPPET - 1] + "…"
    return (
        f"Error: tool call {number} could not be read: {problem}. You wrote: {snippet!r}. "
        f"Write each call as:\n{CALL_FORM}"
    )


# -- messages the template renders ----------------------------------------------------------


def call_entry(call: ToolCall) -> dict[str, Any]:
    """One entry of an assistant message's ``tool_calls`` (OpenAI shape; the template unwraps ``function``)."""
    return {"type": "function", "function": {"name": call.name, "arguments": dict(call.arguments)}}


def assistant_message(content: str, calls: Sequence[ToolCall] = (), *, thinking: str | None = None) -> dict[str, Any]:
    """An assistant turn that may call tools. ``content`` is ``""`` when it only calls tools: the
    template calls ``content.startswith`` and fails on None. ``thinking`` becomes ``reasoning_content``,
    which Qwen3's template shows again only for steps after the last real user message."""
    message: dict[str, Any] = {"role": "assistant", "content": content or ""}
    if calls:
        message["tool_calls"] = [call_entry(call) for call in calls]
    if thinking is not None:
        message["reasoning_content"] = thinking
    return message


def tool_message(result: ToolResult) -> dict[str, Any]:
    """A role ``"tool"`` message; the template wraps its content in ``<tool_response>`` and matches
    results to calls by order (there is no call id), so send them in the order of the calls."""
    return {"role": "tool", "name": result.name, "content": result.content or ""}


def tool_messages(results: Sequence[ToolResult]) -> list[dict[str, Any]]:
    return [tool_message(result) for result in results]


# -- a grammar that forces one call ---------------------------------------------------------

_JSON_GBNF = r"""
object ::= "{" ws ( member ( "," ws member )* )? "}"
member ::= string ":" ws value
value  ::= object | array | string | number | "true" | "false" | "null"
array  ::= "[" ws ( value ( "," ws value )* )? "]"
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,15} )?
ws     ::= " "?
"""


def tool_call_grammar(names: Sequence[str], *, no_arguments: bool = False) -> str:
    """GBNF for exactly one ``<tool_call>`` block calling one of ``names`` (arguments: any JSON
    object, or only ``{}`` with ``no_arguments``), written the way Qwen3's template renders calls."""
    if not names:
        raise ValueError("tool_call_grammar needs at least one tool name")
    alternatives = " | ".join(_gbnf_literal(json.dumps(name, ensure_ascii=False)) for name in names)
    arguments = '"{}"' if no_arguments else "object"
    root = (
        f'root ::= "<tool_call>\\n{{\\"name\\": " name ", \\"arguments\\": " {arguments} "}}\\n</tool_call>"\n'
        f"name ::= {alternatives}\n"
    )
    return root + ("" if no_arguments else _JSON_GBNF)


def _gbnf_literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
