"""Configuration: frozen dataclasses read from one TOML file, validated on construction.

Where things live:
- the *home* (all data) is ``--data-dir``, else ``$CLAWDESK_HOME``, else the platform's user data
  dir (``platformdirs``);
- the config file is ``<home>/config.toml`` (optional; every key has a default);
- command-line flags override the file via :func:`dataclasses.replace`.

Nothing here runs at import time; :func:`load_config` is called by ``cli.main``.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawdesk.config_mcp import ENV_NAME, MCPConfig, build_mcp
from clawdesk.config_train import (  # noqa: F401 - re-exported: clawdesk.config is where callers read them
    ADVANTAGES,
    BASE_DTYPES,
    KEEP_SATISFIED,
    STEP_REWARDS,
    TEACHERS,
    TRAIN_DEVICE,
    TrainConfig,
)
from clawdesk.errors import ConfigError

DEFAULT_SYSTEM_PROMPT = (
    "You are ClawDesk, a helpful personal assistant running privately on the user's own "
    "computer. Answer clearly and concisely."
)


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


@dataclass(frozen=True)
class ModelConfig:
    """Which GGUF to serve and how llama.cpp runs it."""

    name: str = "qwen3-4b"  # a known name (see clawdesk.models) or a path to a .gguf
    n_ctx: int = 8192
    n_threads: int = 0  # fixed count; 0 = automatic: every core, fewer while the trainer or other programs compute
    n_gpu_layers: int = -1  # -1 = all layers on the GPU when llama.cpp was built with one
    seed: int = 1234

    def __post_init__(self) -> None:
        _check(bool(self.name.strip()), "model.name must not be empty")
        _check(256 <= self.n_ctx <= 262144, f"model.n_ctx must be in 256..262144, got {self.n_ctx}")
        _check(self.n_threads >= 0, f"model.n_threads must be >= 0, got {self.n_threads}")
        _check(self.n_gpu_layers >= -1, f"model.n_gpu_layers must be >= -1, got {self.n_gpu_layers}")


@dataclass(frozen=True)
class ChatConfig:
    """Sampling and input limits for chat replies."""

    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    temperature: float = 0.7
    top_p: float = 0.9
    max_reply_tokens: int = 1024
    repeat_stop: int = 64  # a reply that repeats itself this many tokens ends there (engine/repeats.py); 0 = never
    thinking: bool = True  # default for new chats (Qwen3 only)
    max_message_chars: int = 100_000

    def __post_init__(self) -> None:
        _check(0.0 <= self.temperature <= 2.0, f"chat.temperature must be in 0..2, got {self.temperature}")
        _check(0.0 < self.top_p <= 1.0, f"chat.top_p must be in (0, 1], got {self.top_p}")
        _check(self.max_reply_tokens >= 1, "chat.max_reply_tokens must be >= 1")
        _check(
            self.repeat_stop == 0 or self.repeat_stop >= 16,
            f"chat.repeat_stop must be 0 (off) or >= 16 tokens, got {self.repeat_stop}",
        )
        _check(self.max_message_chars >= 1, "chat.max_message_chars must be >= 1")


@dataclass(frozen=True)
class JudgeConfig:
    """The self-judge that scores replies from the next state."""

    votes: int = 3
    temperature: float = 0.6
    max_tokens: int = 320  # fits a grammar-constrained hint (≤ 240 chars) with its markers
    model: str = ""  # empty = judge with the served model's base weights
    pending_max_age_hours: float = 72.0
    # How a vote is cast (compared on assets/judge-set.jsonl in docs/learning.md): "channel" picks
    # the framing that best explains the next state (v3), "logprob" the most likely outcome word
    # after few-shot examples (v2), "sampled" samples a chat answer (v1).
    method: str = "channel"
    # logprob only: subtract each answer's log-prob on a content-free query ("N/A"), which removes
    # a small model's prior for one answer word (contextual calibration; docs/learning.md).
    calibrate: bool = True
    # sampled only: grammar-constrained votes (a short reason, then always a parseable score).
    constrained: bool = True
    # Tool steps: failure evidence in results whose status is ok ("2 failed", a traceback, {"ok":
    # false}) decides before the model (clawdesk/judge/evidence.py; measured in docs/learning.md).
    tool_evidence: bool = True
    # channel only: a next message the judge scored unsatisfied that names an aspect of a reply's form
    # (length, lists, paragraphs, opening, closing, tone, language: clawdesk/store/pref_topics.py)
    # says how the reply should have been, so it is the hint even when the directive votes said no
    # (measured in docs/learning.md, "Form wishes as hints").
    form_hints: bool = True

    def __post_init__(self) -> None:
        _check(1 <= self.votes <= 15, f"judge.votes must be in 1..15, got {self.votes}")
        _check(0.0 <= self.temperature <= 2.0, "judge.temperature must be in 0..2")
        _check(self.max_tokens >= 16, "judge.max_tokens must be >= 16")
        _check(self.pending_max_age_hours > 0, "judge.pending_max_age_hours must be > 0")
        _check(
            self.method in ("channel", "logprob", "sampled"),
            f"judge.method must be channel, logprob or sampled, got {self.method!r}",
        )


# clawdesk.tools.builtins.BUILTIN_NAMES (in that order) and clawdesk.tools.types.POLICIES;
# tests/test_config.py fails when a tool is added there and not here.
BUILTIN_TOOL_NAMES: tuple[str, ...] = (
    "list_files", "read_file", "search_files", "write_file", "edit_file", "run_shell", "current_time",
    "remember", "recall", "forget_note",
)  # fmt: skip
TOOL_POLICIES: tuple[str, ...] = ("auto", "ask", "never")


@dataclass(frozen=True)
class ToolsConfig:
    """The agent's tools: where they may work, how long and how much, and which need consent."""

    enabled: bool = True
    workspace: str = ""  # "" = <data dir>/workspace; a relative path is relative to the data dir
    max_steps: int = 8  # model calls for one user message (the agent loop)
    shell_timeout_s: float = 30.0  # run_shell: then the whole process group is stopped
    read_max_bytes: int = 10_000  # read_file shows this much, then says how to read on (~2.5k tokens)
    output_max_chars: int = 10_000  # any tool result the model reads is cut to this (head and tail kept)
    # Environment variables run_shell gets besides PATH, HOME, LANG, LC_*, USER, TMPDIR, TERM (e.g. ["CC"]).
    shell_env: tuple[str, ...] = ()
    # [tools.policy] NAME = "auto" | "ask" | "never" (MCP tools: "server.tool" = ...); else each tool's default.
    policy: dict[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        _check(1 <= self.max_steps <= 64, f"tools.max_steps must be in 1..64, got {self.max_steps}")
        timeout = self.shell_timeout_s
        _check(0 < timeout <= 3600, f"tools.shell_timeout_s must be in (0, 3600], got {timeout}")
        _check(1000 <= self.read_max_bytes <= 10_000_000, "tools.read_max_bytes must be in 1000..10000000")
        _check(1000 <= self.output_max_chars <= 1_000_000, "tools.output_max_chars must be in 1000..1000000")
        _check("\0" not in self.workspace, "tools.workspace must not contain a NUL byte")
        _check(
            isinstance(self.shell_env, list | tuple)
            and all(isinstance(n, str) and ENV_NAME.fullmatch(n) for n in self.shell_env),
            f'tools.shell_env must be a list of variable names, e.g. ["CC", "GOPATH"], got {self.shell_env!r}',
        )
        object.__setattr__(self, "shell_env", tuple(self.shell_env))
        _check(isinstance(self.policy, dict), 'tools.policy must be a table: [tools.policy] then run_shell = "ask"')
        if not self.policy:
            return
        for name, value in self.policy.items():
            _check(value in TOOL_POLICIES, f'tools.policy.{name} must be "auto", "ask" or "never", got {value!r}')
            _check(
                name in BUILTIN_TOOL_NAMES or "." in name,
                f"tools.policy.{name}: there is no built-in tool {name!r} (MCP tools are written "
                f'"server.tool"); the built-in tools are {", ".join(BUILTIN_TOOL_NAMES)}',
            )


MEMORY_PLACEMENTS = ("auto", "system", "user")


@dataclass(frozen=True)
class MemoryConfig:
    """The preference memory: standing preferences the judge noted, rendered into every new turn's prompt."""

    enabled: bool = True  # false: no item is noted and none is rendered (the items stay listed)
    budget_tokens: int = 128  # the most prompt tokens the rendered items take; 128, not 256: README "Cost"
    # Where the items go: "system" (after the system prompt: in the cached prefix, paid once per chat)
    # or "user" (after the turn's own message, where the bundled demo model follows them: docs/learning.md
    # "Where the memory sits"; the earlier exchange is evaluated again each turn). "auto": "user" on the
    # bundled demo model (measured there), "system" on any other (Qwen3-4B: the cached prefix).
    placement: str = "auto"

    def __post_init__(self) -> None:
        _check(
            self.placement in MEMORY_PLACEMENTS,
            f"memory.placement must be one of {', '.join(MEMORY_PLACEMENTS)}, got {self.placement!r}",
        )
        _check(
            32 <= self.budget_tokens <= 8192,
            "memory.budget_tokens must be in 32..8192 (the prompt tokens the memory may take), "
            f"got {self.budget_tokens}",
        )


@dataclass(frozen=True)
class Config:
    """Everything ClawDesk reads from ``config.toml``, plus the resolved home directory."""

    home: Path
    model: ModelConfig = field(default_factory=ModelConfig)
    chat: ChatConfig = field(default_factory=ChatConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    mcp: MCPConfig = field(default_factory=MCPConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)

    @property
    def db_path(self) -> Path:
        return self.home / "clawdesk.db"

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    @property
    def adapters_dir(self) -> Path:
        return self.home / "adapters"

    @property
    def config_path(self) -> Path:
        return self.home / "config.toml"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def workspace_dir(self) -> Path:
        """Where tools read and write: ``tools.workspace`` (relative to the data dir), else ``<data dir>/workspace``."""
        if not self.tools.workspace:
            return self.home / "workspace"
        path = Path(self.tools.workspace).expanduser()
        return path if path.is_absolute() else self.home / path


def default_home(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """``--data-dir`` beats ``$CLAWDESK_HOME`` beats the platform user data dir."""
    if data_dir:
        return Path(data_dir).expanduser().resolve()
    env = os.environ.get("CLAWDESK_HOME")
    if env:
        return Path(env).expanduser().resolve()
    import platformdirs  # imported here: nothing happens at import time of this module

    return Path(platformdirs.user_data_dir("clawdesk", appauthor=False))


_SECTIONS = {
    "model": ModelConfig,
    "chat": ChatConfig,
    "judge": JudgeConfig,
    "train": TrainConfig,
    "tools": ToolsConfig,
    "memory": MemoryConfig,
}


_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "str | bool": (str, bool)}


def _build_section(cls: type, name: str, raw: Any, source: Path) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: [{name}] must be a table")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(
            f"{source}: unknown key(s) in [{name}]: {', '.join(unknown)}. Known keys: {', '.join(sorted(known))}."
        )
    for f in dataclasses.fields(cls):
        if f.name in raw:
            value, allowed = raw[f.name], _TYPES.get(str(f.type), (object,))
            if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
                raise ConfigError(f"{source}: {name}.{f.name} must be a {f.type}, got {value!r}")
    try:
        return cls(**raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {exc}. Fix the value or delete the key to use the default.") from exc


def parse_train_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` (a ``[train]`` key, the value written as in TOML) → ``(key, value)``, type-checked like the file.

    For command lines that try one setting without a config file (``clawdesk eval --train-option``);
    the range checks happen when the value goes into :class:`TrainConfig`.
    """
    key, sep, value = text.partition("=")
    key, value = key.strip(), value.strip()
    known = {f.name: f for f in dataclasses.fields(TrainConfig)}
    if not sep or key not in known:
        raise ValueError(f"{text!r} is not KEY=VALUE with a [train] key; known keys: {', '.join(sorted(known))}")
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value  # a bare word: a string ("baseline"), as a shell makes quoting awkward
    allowed = _TYPES.get(str(known[key].type), (object,))
    if not isinstance(parsed, allowed) or (isinstance(parsed, bool) and bool not in allowed):
        raise ValueError(f"train.{key} must be a {known[key].type}, got {parsed!r}")
    return key, parsed


def load_config(home: Path, **overrides: Any) -> Config:
    """Read ``<home>/config.toml`` (if present) and apply ``section__key=value`` overrides."""
    path = home / "config.toml"
    raw: dict[str, Any] = {}
    if path.exists():
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path} is not valid TOML ({exc}). Fix it or move it aside.") from exc
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    unknown = sorted(set(raw) - set(_SECTIONS) - {"mcp"})
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {', '.join(unknown)}; known: {', '.join(_SECTIONS)}, mcp")
    sections = {
        name: dict(raw.get(name, {})) if isinstance(raw.get(name, {}), dict) else raw[name] for name in _SECTIONS
    }
    for key, value in overrides.items():
        if value is None:
            continue
        section, _, name = key.partition("__")
        if section not in _SECTIONS or not name:
            raise ValueError(f"bad override key {key!r}")
        sections[section][name] = value
    built = {name: _build_section(cls, name, sections[name], path) for name, cls in _SECTIONS.items()}
    mcp = build_mcp(raw.get("mcp", {}), path)
    _check_tool_servers(built["tools"], mcp, path)
    if built["memory"].budget_tokens > built["model"].n_ctx // 4:
        # The system prompt is never dropped to fit the context: a memory this large would crowd out the chat.
        raise ConfigError(
            f"{path}: memory.budget_tokens = {built['memory'].budget_tokens} is more than a quarter of the context "
            f"window (model.n_ctx = {built['model'].n_ctx}); lower it or raise model.n_ctx."
        )
    config = Config(home=home, mcp=mcp, **built)
    check_workspace(config.workspace_dir, config.home, "tools.workspace")
    return config


def check_workspace(workspace: Path, home: Path, what: str) -> None:
    """A workspace may not contain the data dir: the tools would reach the chat history, notes and adapters."""
    ws = Path(os.path.realpath(workspace))
    data = Path(os.path.realpath(home))
    if data == ws or ws in data.parents:
        raise ConfigError(
            f"{what} {workspace} contains ClawDesk's data dir {home}: tools could read and change your chats, notes "
            "and adapters. Use a folder outside it (the default is <data dir>/workspace)."
        )


def _check_tool_servers(tools: ToolsConfig, mcp: MCPConfig, source: Path) -> None:
    """A ``[tools.policy]`` entry for an MCP tool must name a configured server (a typo would silently not apply)."""
    servers = {s.name for s in mcp.servers}
    for name in tools.policy:
        server = name.split(".", 1)[0]
        if "." in name and server not in servers:
            known = ", ".join(sorted(servers)) or "none is configured"
            raise ConfigError(
                f'{source}: tools.policy."{name}": there is no MCP server {server!r} ([mcp.servers.{server}]); '
                f"the servers are: {known}. Fix the name or delete the key."
            )
