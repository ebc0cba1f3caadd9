"""The built-in tools as one provider: their specs, ``current_time``, and dispatching a call to its function.

The tools themselves live by kind: :mod:`clawdesk.tools.files` (workspace files),
:mod:`clawdesk.tools.shell` (``run_shell``) and :mod:`clawdesk.tools.memory` (notes). A
:class:`BuiltinTools` is what the registry sees: ``specs()`` and ``call(name, arguments, timeout)``,
like any other provider (MCP servers). Problems the model can fix come back as ``error`` results.
"""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path

from clawdesk.errors import ToolInputError
from clawdesk.tools import files, memory, search, shell
from clawdesk.tools.jail import Workspace
from clawdesk.tools.types import ToolResult, ToolSpec, object_schema

CURRENT_TIME = ToolSpec(
    "current_time",
    "The current local date, time, weekday and time zone.",
    object_schema({}, []),
    default_policy="auto",
)

SPECS: tuple[ToolSpec, ...] = (*files.SPECS, shell.SPEC, CURRENT_TIME, *memory.SPECS)
BUILTIN_NAMES: tuple[str, ...] = tuple(s.name for s in SPECS)


class BuiltinTools:
    """The built-in tools over one workspace and one database (for the notes)."""

    def __init__(
        self,
        workspace: Workspace,
        db_path: Path,
        *,
        read_max_bytes: int,
        output_max_chars: int,
        shell_env: tuple[str, ...] = (),
    ):
        self.workspace = workspace
        self.db_path = db_path
        self.read_max_bytes = read_max_bytes
        self.output_max_chars = output_max_chars
        self.shell_env = tuple(shell_env)  # names run_shell passes on besides shell.ENV_ALLOWED

    def specs(self) -> list[ToolSpec]:
        return list(SPECS)

    def status(self) -> list[tuple[str, str, str]]:
        return [("builtin", "ready", f"workspace {self.workspace.root}")]

    def close(self) -> None:
        """Nothing to stop: a run_shell call never outlives itself."""

    def call(self, name: str, arguments: dict, timeout: float, cancel: threading.Event | None = None) -> ToolResult:
        """Run one built-in; ``timeout`` bounds ``run_shell`` (the others are bounded by their own caps)."""
        try:
            if name == "run_shell":
                return self._shell(arguments, timeout, cancel)
            return ToolResult(name, "ok", self._run(name, arguments))
        except ToolInputError as err:
            return ToolResult(name, "error", str(err))
        except UnicodeError:
            # JSON can carry a lone surrogate ("\ud800"): it cannot be a file name or be written as UTF-8.
            return ToolResult(name, "error", f"the arguments of {name} hold text that is not valid Unicode; fix it")
        except OSError as exc:
            # The disk, permissions, a file that vanished: said plainly, so the model can try something else.
            where = f" ({exc.filename})" if exc.filename else ""
            return ToolResult(name, "error", f"{name} failed: {exc.strerror or exc}{where}")

    def _run(self, name: str, args: dict) -> str:
        ws = self.workspace
        if name == "list_files":
            return files.list_files(ws, **args)
        if name == "read_file":
            return files.read_file(ws, **args, max_bytes=self.read_max_bytes)
        if name == "search_files":
            return search.search_files(ws, **args)
        if name == "write_file":
            return files.write_file(ws, **args)
        if name == "edit_file":
            return files.edit_file(ws, **args)
        if name == "current_time":
            return _now()
        if name == "remember":
            return memory.remember(self.db_path, **args)
        if name == "recall":
            return memory.recall(self.db_path, **args)
        if name == "forget_note":
            return memory.forget_note(self.db_path, **args)
        raise ToolInputError(f"there is no built-in tool called {name!r}")

    def _shell(self, args: dict, timeout: float, cancel: threading.Event | None) -> ToolResult:
        asked = args.get("timeout_s")
        if asked is not None and asked <= 0:
            raise ToolInputError(f"timeout_s must be more than 0, got {asked}")
        # The model may ask for less time than the configured limit, never more.
        limit = timeout if asked is None else min(float(asked), timeout)
        outcome = shell.run_shell(
            args["command"],
            self.workspace.real_root,
            timeout_s=limit,
            max_chars=self.output_max_chars,
            cancel=cancel,
            env_names=self.shell_env,
        )
        return shell.shell_result(outcome, limit)


def _now() -> str:
    now = datetime.now().astimezone()
    return now.strftime("%Y-%m-%d %H:%M:%S, %A, time zone %Z (UTC%z)")
