"""The ``[mcp]`` section of ``config.toml``: the MCP servers the agent may call, validated like the rest.

Split from :mod:`clawdesk.config` for size; :class:`~clawdesk.config.Config` holds an
:class:`MCPConfig` and :func:`~clawdesk.config.load_config` builds it with :func:`build_mcp`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawdesk.errors import ConfigError


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


MCP_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]+")  # no dots: a tool is named "<server>.<tool>"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class MCPServerConfig:
    """One MCP server run over stdio, configured like Claude Desktop (``[mcp.servers.NAME]``).

    The server's environment is exactly ``env``: nothing of ClawDesk's own environment (API keys,
    PATH, HOME) reaches it unless named here.
    """

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, hash=False)
    start_timeout_s: float = 30.0  # spawn + initialize + list tools
    call_timeout_s: float = 60.0  # one tools/call, unless the caller passes its own

    def __post_init__(self) -> None:
        where = f"mcp.servers.{self.name}"
        _require(bool(MCP_SERVER_NAME.fullmatch(self.name)), f"{where}: a server name may use only A-Z a-z 0-9 _ -")
        _require(bool(self.command.strip()), f"{where}.command must not be empty")
        _require("\0" not in self.command, f"{where}.command must not contain a NUL byte")
        _require(all("\0" not in a for a in self.args), f"{where}.args must not contain a NUL byte")
        for key, value in self.env.items():
            _require(bool(ENV_NAME.fullmatch(key)), f"{where}.env: {key!r} is not a valid variable name")
            _require("\0" not in value, f"{where}.env.{key} must not contain a NUL byte")
        _require(0 < self.start_timeout_s <= 600, f"{where}.start_timeout_s must be in (0, 600]")
        _require(0 < self.call_timeout_s <= 3600, f"{where}.call_timeout_s must be in (0, 3600]")


@dataclass(frozen=True)
class MCPConfig:
    """The MCP servers whose tools the agent may call (none by default)."""

    servers: tuple[MCPServerConfig, ...] = ()


_MCP_SERVER_TYPES = {
    "command": (str, "a string"),
    "args": (list, "a list of strings"),
    "env": (dict, "a table of strings"),
    "start_timeout_s": ((int, float), "a number of seconds"),
    "call_timeout_s": ((int, float), "a number of seconds"),
}


def build_mcp(raw: Any, source: Path) -> MCPConfig:
    """``[mcp.servers.NAME]`` tables -> :class:`MCPConfig`; every error names ``mcp.servers.NAME.key``."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: [mcp] must be a table")
    if set(raw) - {"servers"}:
        unknown = ", ".join(sorted(set(raw) - {"servers"}))
        raise ConfigError(f"{source}: unknown key(s) in [mcp]: {unknown}. Known keys: servers.")
    tables = raw.get("servers", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{source}: mcp.servers must be a table of [mcp.servers.NAME] tables")
    servers = []
    for name, table in tables.items():
        where = f"mcp.servers.{name}"
        if not isinstance(table, dict):
            raise ConfigError(f'{source}: {where} must be a table with at least command = "..."')
        unknown = sorted(set(table) - set(_MCP_SERVER_TYPES))
        if unknown:
            known = ", ".join(_MCP_SERVER_TYPES)
            raise ConfigError(f"{source}: unknown key(s) in [{where}]: {', '.join(unknown)}. Known keys: {known}.")
        if "command" not in table:
            raise ConfigError(f"{source}: {where}.command is missing: name the program that runs the server.")
        for key, value in table.items():
            allowed, what = _MCP_SERVER_TYPES[key]
            items = value if key == "args" else value.values() if key == "env" else ()
            if not isinstance(value, allowed) or isinstance(value, bool) or not all(isinstance(v, str) for v in items):
                raise ConfigError(f"{source}: {where}.{key} must be {what}, got {value!r}")
        try:
            values = {**table, "args": tuple(table.get("args", ())), "env": dict(table.get("env", {}))}
            servers.append(MCPServerConfig(name=name, **values))
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}. Fix the value or delete the key to use the default.") from exc
    return MCPConfig(servers=tuple(servers))
