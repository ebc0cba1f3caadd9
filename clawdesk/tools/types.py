"""The values every part of the tools stage passes around: a tool's spec, a call, a result.

Kept apart from the registry so the chat format (parsing ``<tool_call>`` blocks), the built-in
tools, consent and MCP servers agree on one shape without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

POLICIES = ("auto", "ask", "never")
STATUSES = ("ok", "error", "denied", "timeout")


def object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """The JSON Schema of a built-in tool's arguments: an object with exactly these properties."""
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a tool, and where it comes from."""

    name: str  # built-ins: "read_file"; MCP: "<server>.<tool>"
    description: str
    parameters: dict[str, Any]  # JSON Schema of the arguments object
    source: str = "builtin"  # "builtin" or "mcp:<server>"
    default_policy: str = "ask"  # auto | ask | never, before config.toml overrides it

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function entry a chat template's ``tools=`` expects."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for (parsed from its reply), in the order it asked."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw: str = ""  # the block's text as the model wrote it, for logs and error messages


@dataclass(frozen=True)
class ToolResult:
    """What a call gave back; ``content`` is exactly what the model reads as the tool message."""

    name: str
    status: str  # ok | error | denied | timeout
    content: str
    duration_s: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"bad tool result status {self.status!r}")
