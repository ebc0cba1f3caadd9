"""``clawdesk ask`` with tools: its consent flags, the agent service it runs, and the tool activity it prints.

The reply streams to stdout without its ``<tool_call>`` blocks; each call's outcome goes to stderr
as one line (``[tool read_file notes.txt → ok]``). Consent is headless, as for ``clawdesk tools
call``: ``--yes`` or ``--allow TOOL[,TOOL]``, else a call whose policy is ``ask`` is denied, recorded
as denied and not run. A model whose template cannot render tools (the bundled demo model) answers
as a plain chat, with a one-line note when tools are on.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from clawdesk.cli.common import workspace_path
from clawdesk.config import Config
from clawdesk.errors import InputError

TOOLS_NEED_NOTE = (
    "tools need a model whose chat template can call them, e.g. Qwen3-4B (`clawdesk pull`); "
    "this model answers without tools"
)
CALL_OPEN = "<tool_call>"
SUMMARY_CHARS = 48
REASON_CHARS = 100


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--yes", action="store_true", help="consent to every tool call whose policy is ask")
    p.add_argument(
        "--allow", action="append", default=[], metavar="TOOL[,TOOL]", help="consent for these tools (repeatable)"
    )
    p.add_argument("--workspace", metavar="DIR", help="the directory file tools work in (default: tools.workspace)")


def check_flags(args: argparse.Namespace, config: Config) -> tuple[Path | None, set[str]]:
    """(workspace, allowed tools) from the flags, checked before a model is loaded."""
    from clawdesk.tools.builtins import BUILTIN_NAMES

    allow = {name.strip() for item in args.allow for name in item.split(",") if name.strip()}
    if not config.tools.enabled and (args.yes or allow or args.workspace is not None):
        raise InputError(
            f"--yes, --allow and --workspace are for tools, and tools are turned off (tools.enabled = false in "
            f"{config.config_path}); turn them on or leave the flags out"
        )
    # An MCP tool is "<server>.<tool>": its server must be configured (its tools are only known once it runs).
    servers = {s.name for s in config.mcp.servers}
    unknown = sorted(n for n in allow if n not in BUILTIN_NAMES and not ("." in n and n.split(".", 1)[0] in servers))
    if unknown:
        raise InputError(f"--allow names no tool called {', '.join(unknown)}; `clawdesk tools` lists them")
    return workspace_path(args.workspace, config), allow


class ToolActivity:
    """``on_event`` for ``ask``: reply text to ``out`` without tool-call blocks, one line per call to ``err``."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None):
        self.out = out or sys.stdout  # looked up now, not at import: tests and callers swap the streams
        self.err = err or sys.stderr
        self._raw = ""  # the current step's text
        self._shown = 0  # how much of it was written
        self._line_open = False  # text was written since the last newline

    def __call__(self, event) -> None:
        from clawdesk.agent import StepStarted, StepText, ToolFinished

        if isinstance(event, StepStarted):
            self.finish()
            self._raw, self._shown = "", 0
        elif isinstance(event, StepText):
            self._raw += event.delta.text
            self._write(self._visible_end())
        elif isinstance(event, ToolFinished):
            self._newline()
            print(tool_line(event.call, event.result), file=self.err, flush=True)

    def finish(self) -> None:
        """Write what was held back (a possible start of ``<tool_call>`` that never became one)."""
        if CALL_OPEN not in self._raw:
            self._write(len(self._raw))
        self._newline()

    def _visible_end(self) -> int:
        at = self._raw.find(CALL_OPEN)
        if at >= 0:
            return at
        for keep in range(min(len(CALL_OPEN) - 1, len(self._raw)), 0, -1):
            if CALL_OPEN.startswith(self._raw[-keep:]):
                return len(self._raw) - keep
        return len(self._raw)

    def _write(self, end: int) -> None:
        if end > self._shown:
            text = self._raw[self._shown : end]
            self._shown = end
            self.out.write(text)
            self.out.flush()
            self._line_open = not text.endswith("\n")

    def _newline(self) -> None:
        if self._line_open:
            self.out.write("\n")
            self.out.flush()
            self._line_open = False


def tool_line(call, result) -> str:
    """``[tool read_file notes.txt → ok]``; a call that did not work says why in a few words."""
    summary = next((v for v in call.arguments.values() if isinstance(v, str) and v.strip()), "")
    summary = " ".join(summary.split())
    if len(summary) > SUMMARY_CHARS:
        summary = summary[: SUMMARY_CHARS - 1] + "…"
    head = f"tool {call.name}" + (f" {summary}" if summary else "")
    if result.status == "ok":
        return f"[{head} → ok]"
    reason = " ".join(result.content.split())
    if len(reason) > REASON_CHARS:
        reason = reason[: REASON_CHARS - 1] + "…"
    return f"[{head} → {result.status}: {reason}]"
