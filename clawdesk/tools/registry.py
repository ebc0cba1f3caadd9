"""The tool registry: every tool the agent may call (built-ins and providers such as MCP servers), and running one call.

:meth:`Registry.run` is the single path a call takes, for the agent loop and for
``clawdesk tools call`` alike: find the tool, apply its policy, check the arguments against its
JSON Schema, ask for consent when the policy is ``ask``, run it, time it and cap its output.
Anything the model can get wrong (an unknown tool, missing or mistyped arguments, a bad path) comes
back as an ``error`` :class:`ToolResult` the model can read and fix; a call that was not allowed
comes back ``denied``. It never raises for what the model wrote.

A *provider* is anything with ``specs()``, ``call(name, arguments, timeout)``, ``status()`` and
``close()`` (:class:`Provider`): :class:`~clawdesk.tools.builtins.BuiltinTools`, and
:class:`~clawdesk.tools.mcp.MCPServers` for all configured MCP servers.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from clawdesk.errors import ClawDeskError
from clawdesk.tools.builtins import BuiltinTools
from clawdesk.tools.consent import Consent, effective_policy
from clawdesk.tools.jail import Workspace
from clawdesk.tools.types import ToolCall, ToolResult, ToolSpec

if TYPE_CHECKING:
    from clawdesk.config import Config

log = logging.getLogger(__name__)


class Provider(Protocol):
    """A source of tools. ``call`` returns a result for every call (errors included); ``timeout`` None = its own."""

    def specs(self) -> list[ToolSpec]: ...

    def call(self, name: str, arguments: dict[str, Any], timeout: float | None = None) -> ToolResult: ...

    def status(self) -> list[tuple[str, str, str]]: ...  # (name, state, detail), e.g. ("fs", "failed", "…")

    def close(self) -> None: ...


@dataclass(frozen=True)
class ProviderState:
    """One line of ``clawdesk tools``: a server (or the built-ins) and its state."""

    name: str
    state: str  # MCP: "not started" | "running" | "failed"; built-ins: "ready"
    detail: str


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


class Registry:
    """The tools of one chat (or one command), their policies, and the limits every call runs under."""

    def __init__(
        self,
        providers: Sequence[Provider],
        *,
        policies: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
        output_max_chars: int = 10_000,
    ):
        self.providers = list(providers)
        self.policies = dict(policies or {})
        self.timeout_s = timeout_s
        self.output_max_chars = output_max_chars
        self._index: dict[str, tuple[ToolSpec, Provider]] | None = None

    # -- what there is ----------------------------------------------------------------------

    def _tools(self) -> dict[str, tuple[ToolSpec, Provider]]:
        # Built lazily: an MCP provider starts its server when first asked for its specs.
        if self._index is None:
            index: dict[str, tuple[ToolSpec, Provider]] = {}
            for provider in self.providers:
                for spec in provider.specs():
                    index.setdefault(spec.name, (spec, provider))  # the first provider wins a name
            self._index = index
        return self._index

    def all_specs(self) -> list[ToolSpec]:
        """Every tool, ``never`` included (for ``clawdesk tools`` and settings screens)."""
        return [spec for spec, _ in self._tools().values()]

    def specs(self) -> list[ToolSpec]:
        """The tools offered to the model: those whose policy is not ``never``."""
        return [s for s in self.all_specs() if self.policy(s) != "never"]

    def spec(self, name: str) -> ToolSpec | None:
        entry = self._tools().get(name)
        return entry[0] if entry else None

    def policy(self, spec: ToolSpec) -> str:
        return effective_policy(spec, self.policies)

    def states(self) -> list[ProviderState]:
        return [ProviderState(*row) for p in self.providers for row in p.status()]

    def close(self) -> None:
        """Stop what the providers started (MCP server processes)."""
        for provider in self.providers:
            provider.close()

    # -- running one call -------------------------------------------------------------------

    def run(self, call: ToolCall, consent: Consent, cancel: threading.Event | None = None) -> ToolResult:
        """Run ``call`` under its policy and ``consent``; the result's content is capped and its duration set.

        Never raises for a call: a tool's unexpected failure (RecursionError, MemoryError, an OSError
        nobody foresaw, a bug) becomes an ``error`` result the model reads and the turn records, and
        is logged with its traceback, so no tool call can end the app.
        """
        started = time.monotonic()
        try:
            result = self._run(call, consent, cancel)
        except Exception as exc:  # the edge between tools and the agent: converted, logged, never swallowed
            log.exception("tool %r failed unexpectedly", getattr(call, "name", call))
            name = call.name if isinstance(call.name, str) else str(call.name)
            result = ToolResult(name, "error", f"{name} failed unexpectedly ({type(exc).__name__}: {exc})"[:2000])
        return ToolResult(
            call.name, result.status, cap_text(result.content, self.output_max_chars), time.monotonic() - started
        )

    def _run(self, call: ToolCall, consent: Consent, cancel: threading.Event | None) -> ToolResult:
        name = call.name
        if isinstance(name, str) and has_control(name):
            return ToolResult(
                repr(name)[1:-1], "error", f"the tool name {name!r} holds control characters; no tool has such a name"
            )
        entry = self._tools().get(name) if isinstance(name, str) else None
        if entry is None:
            offered = ", ".join(s.name for s in self.specs()) or "none"
            return ToolResult(str(name), "error", f"there is no tool called {name!r}; the tools are: {offered}")
        spec, provider = entry
        policy = self.policy(spec)
        if policy == "never":
            return ToolResult(name, "denied", f"{name} is turned off by the user (policy never); it was not run.")
        arguments, problem = check_arguments(spec, call.arguments)
        if problem:
            return ToolResult(name, "error", problem)
        if bad := _controls_in(arguments):
            return ToolResult(
                name,
                "error",
                f"the argument {bad!r} of {name} holds control characters (escape codes, NUL…); only tab and line "
                "breaks are allowed in text. Nothing was run.",
            )
        if policy == "ask":
            decision = consent.decide(call, spec)
            if decision.verdict == "instead":
                return ToolResult(name, "denied", f"The user did not run this call and said instead: {decision.text}")
            if not decision.allowed:
                return ToolResult(
                    name, "denied", decision.text or f"The user denied this call to {name}; it was not run."
                )
        try:
            if isinstance(provider, BuiltinTools):
                return provider.call(name, arguments, self.timeout_s, cancel=cancel)
            return provider.call(name, arguments, None)
        except ClawDeskError as err:  # a provider's own failure (an MCP server that died), said in its words
            return ToolResult(name, "error", f"{name} failed: {err}")
        except MemoryError:
            return ToolResult(
                name, "error", f"{name} ran out of memory; ask for less (a smaller file, a narrower path)"
            )
        except RecursionError:
            return ToolResult(name, "error", f"{name} went too deep (nesting too deep to handle); use a narrower path")


def check_arguments(spec: ToolSpec, arguments: Any) -> tuple[dict[str, Any], str]:
    """``(arguments, "")`` when they fit the spec's schema, else ``({}, message for the model)``.

    Checks the top level: an object, the required keys, no keys the schema forbids, and each
    value's JSON type (and ``enum``). A JSON string holding an object is accepted as that object.
    """
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return {}, f"the arguments of {spec.name} are not valid JSON; give them as an object: {signature(spec)}"
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return {}, f"the arguments of {spec.name} must be a JSON object: {signature(spec)}"
    schema = spec.parameters or {}
    props: dict[str, Any] = schema.get("properties") or {}
    problems = [f"{key!r} is required" for key in schema.get("required", []) if key not in arguments]
    if schema.get("additionalProperties") is False:
        problems += [f"{key!r} is not a parameter" for key in arguments if key not in props]
    for key, value in arguments.items():
        prop = props.get(key)
        if not isinstance(prop, dict):
            continue
        wanted = prop.get("type")
        names = [wanted] if isinstance(wanted, str) else list(wanted or [])
        if names and not any(_is_type(value, t) for t in names):
            problems.append(f"{key!r} must be {' or '.join(names)}, got {_json_name(value)} {_short(value)}")
        elif isinstance(value, float) and not math.isfinite(value):  # Python's json reads NaN and Infinity
            problems.append(f"{key!r} must be a finite number, got {value}")
        elif "enum" in prop and value not in prop["enum"]:
            problems.append(f"{key!r} must be one of {json.dumps(prop['enum'])}, got {_short(value)}")
    if problems:
        return {}, f"bad arguments for {spec.name}: {'; '.join(problems)}. Call it as {signature(spec)}"
    # 3.0 passed the integer check; the tool gets 3.
    return {k: int(v) if isinstance(v, float) and _wants_integer(props.get(k)) else v for k, v in arguments.items()}, ""


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # C0 and C1, but tab, LF and CR


def has_control(text: str, *, lines_ok: bool = False) -> bool:
    """Whether ``text`` holds a control character (with ``lines_ok``: other than tab, LF, CR)."""
    if lines_ok:
        return bool(_CONTROL.search(text))
    return any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text)


def _controls_in(value: Any, key: str = "") -> str | None:
    """The name of the first argument whose text (or key) holds a control character other than tab and line breaks."""
    if isinstance(value, str):
        return key or "value" if has_control(value, lines_ok=True) else None
    if isinstance(value, dict):
        for k, v in value.items():
            if has_control(str(k)):
                return str(k)
            if found := _controls_in(v, key or str(k)):
                return found
    if isinstance(value, list):
        for v in value:
            if found := _controls_in(v, key):
                return found
    return None


def _wants_integer(prop: Any) -> bool:
    wanted = prop.get("type") if isinstance(prop, dict) else None
    return wanted == "integer" or (isinstance(wanted, list) and "integer" in wanted and "number" not in wanted)


def signature(spec: ToolSpec) -> str:
    """``read_file(path: string, start_line?: integer)`` — how an error shows a tool's parameters."""
    schema = spec.parameters or {}
    required = set(schema.get("required", []))
    parts = []
    for key, prop in (schema.get("properties") or {}).items():
        kind = prop.get("type", "any") if isinstance(prop, dict) else "any"
        kind = kind if isinstance(kind, str) else "|".join(kind)
        parts.append(f"{key}{'' if key in required else '?'}: {kind}")
    return f"{spec.name}({', '.join(parts)})"


def _is_type(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name in ("integer", "number"):
        return False  # JSON true is not 1
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _JSON_TYPES.get(name, (object,)))


def _json_name(value: Any) -> str:
    for name in ("boolean", "string", "integer", "number", "array", "object", "null"):
        if _is_type(value, name):
            return name
    return type(value).__name__


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cap_text(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, keeping its head and tail (errors often come last)."""
    if len(text) <= limit:
        return text
    marker = f"\n[… {{}} characters left out; the full output is longer than {limit} characters …]\n"
    keep = max(0, limit - len(marker) - 8)
    head = keep * 2 // 3
    tail = keep - head
    cut = len(text) - head - tail
    return text[:head] + marker.format(cut) + (text[-tail:] if tail else "")


def build_registry(config: Config, *, workspace: Path | None = None) -> Registry:
    """The registry for ``config``: the built-ins over the workspace, then the configured MCP servers."""
    from clawdesk.config import check_workspace

    tools = config.tools
    if workspace is not None:
        check_workspace(workspace, config.home, "--workspace")
    builtins = BuiltinTools(
        Workspace(workspace or config.workspace_dir),
        config.db_path,
        # read_file's own "read on from line N" note must fit under the output cap.
        read_max_bytes=min(tools.read_max_bytes, tools.output_max_chars - 200),
        output_max_chars=tools.output_max_chars,
        shell_env=tools.shell_env,
    )
    providers: list[Provider] = [builtins]
    if config.mcp.servers:
        from clawdesk.tools.mcp import MCPServers

        # Servers start lazily (on the first specs()), in the workspace, their stderr in the logs dir.
        providers.append(MCPServers(config.mcp, cwd=builtins.workspace.real_root, log_dir=config.logs_dir))
    return Registry(
        providers, policies=tools.policy, timeout_s=tools.shell_timeout_s, output_max_chars=tools.output_max_chars
    )
