"""Consent: which tool calls may run, from the policy the user set and the answers they gave.

A tool's *effective policy* is the ``[tools.policy]`` entry in ``config.toml``, else its spec's
default: ``auto`` runs, ``never`` never runs (not even with ``--yes``), ``ask`` needs a
:class:`Decision` for the call. A :class:`Consent` belongs to one chat (or one headless command) and
gives that decision: from ``--yes`` / ``--allow``, from a "yes for this chat" given earlier, or by
asking through a callback (the TUI's dialog, run on the UI thread; this module never imports it).
With no way to ask and no standing consent the answer is *deny*: the call is recorded as denied
and never run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from clawdesk.tools.types import POLICIES, ToolCall, ToolSpec

VERDICTS = ("allow", "allow_chat", "deny", "instead")


@dataclass(frozen=True)
class Decision:
    """The answer for one call; ``text`` is the user's words for ``instead`` (or why it was denied)."""

    verdict: str
    text: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"bad consent verdict {self.verdict!r}")

    @property
    def allowed(self) -> bool:
        return self.verdict in ("allow", "allow_chat")


ALLOW = Decision("allow")
ALLOW_CHAT = Decision("allow_chat")  # yes, and do not ask again for this tool in this chat
DENY = Decision("deny")


def instead(text: str) -> Decision:
    """ "No, do this instead…": the text becomes the tool result the model reads (status ``denied``)."""
    return Decision("instead", text)


Ask = Callable[[ToolCall, ToolSpec], Decision]


def effective_policy(spec: ToolSpec, overrides: Mapping[str, str]) -> str:
    """The policy ``config.toml`` sets for this tool, else the tool's default."""
    policy = overrides.get(spec.name, spec.default_policy)
    if policy not in POLICIES:  # config.py validates; an MCP spec's default is the only other source
        return "ask"
    return policy


class Consent:
    """The consent of one chat or command, for calls whose policy is ``ask``."""

    def __init__(self, ask: Ask | None = None, *, allow: Iterable[str] = (), yes: bool = False):
        self.ask = ask
        self.yes = yes
        self.allowed = set(allow)  # --allow, and every "yes for this chat"
        self._lock = threading.Lock()  # a chat's worker thread and its UI may both read/grant

    def decide(self, call: ToolCall, spec: ToolSpec) -> Decision:
        with self._lock:
            if self.yes or spec.name in self.allowed:
                return ALLOW
        if self.ask is None:
            return Decision(
                "deny",
                f"{spec.name} needs the user's consent and none was given, so it was not run "
                f"(headless: add --yes or --allow {spec.name}).",
            )
        decision = self.ask(call, spec)
        if decision.verdict == "allow_chat":
            with self._lock:
                self.allowed.add(spec.name)
        return decision

    def revoke(self, name: str | None = None) -> None:
        """Take back "yes for this chat" for one tool, or for all (``--allow`` is taken back too)."""
        with self._lock:
            if name is None:
                self.allowed.clear()
            else:
                self.allowed.discard(name)


FILE_TOOLS = ("list_files", "read_file", "search_files", "write_file", "edit_file")


def reach(spec: ToolSpec, workspace: str | None, shell_env: tuple[str, ...] = ()) -> str:
    """What a call of ``spec`` can reach, in words for the consent dialog: folders, environment, sandbox."""
    if spec.source.startswith("mcp:"):
        server = spec.source.removeprefix("mcp:")
        return (
            f"Runs in MCP server {server!r}, a program of its own: it reaches what that program does, with the "
            "environment its [mcp.servers] entry names; ClawDesk's workspace and sandbox do not apply to it."
        )
    if spec.name == "run_shell":
        from clawdesk.tools.shell import ENV_ALLOWED, sandbox_state

        names = [*sorted(ENV_ALLOWED | set(shell_env)), "LC_*"]
        confined, how = sandbox_state()
        where = f"in {workspace}" if workspace else "in the workspace"
        writes = (
            f"SANDBOXED: it can write only {where} and its own temporary folder ({how})"
            if confined
            else f"NO SANDBOX: it can read, change and delete anything you can ({how})"
        )
        return (
            f"Runs /bin/sh {where}; it can read any file you can read and use the network. {writes}. "
            f"Environment: {', '.join(names)} only."
        )
    if spec.name in FILE_TOOLS:
        return f"Reaches only files inside {workspace or 'the workspace'} (no symbolic link is followed)."
    if spec.name in ("remember", "forget_note"):
        return "Changes the notes every later chat can recall (F7 lists them)."
    return ""
