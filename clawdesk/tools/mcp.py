"""Tools from MCP servers over stdio: starting them lazily, listing and calling their tools, stopping them.

Owns every Model Context Protocol server process ClawDesk runs (``[mcp.servers.NAME]`` in
``config.toml``). The SDK (PyPI ``mcp``, 2.x) is asyncio/anyio; ClawDesk's stages are synchronous
(the chat runs in Textual thread workers), so one :class:`MCPServers` owns ONE background thread
with its own event loop, and its synchronous methods hand coroutines to that loop and wait.

It is a tool *provider* for the registry:

- ``specs()`` starts every configured server not started yet (in parallel, each within its
  ``start_timeout_s``) and returns the tools of the running ones as ``ToolSpec`` named
  ``<server>.<tool>`` (source ``mcp:<server>``, policy ``ask`` until config.toml says otherwise);
- ``call(name, arguments, timeout=None)`` returns a ``ToolResult`` (ok / error / timeout) and never
  raises for anything a server can do: a server that fails to start, answers garbage or dies gives
  an ``error`` result naming the server and what to check, and the chat goes on without it;
- ``status()`` lists ``(server, state, detail)`` with state "not started" / "running" / "failed";
- ``close()`` stops every server: stdin closed, then SIGTERM and SIGKILL to its process group.

Environment: a server gets exactly the ``env`` its config names, nothing of ClawDesk's (no API
keys, no HOME, no PATH unless named). The command itself is resolved with ``shutil.which`` on
ClawDesk's PATH when the server starts, so ``command = "npx"`` works without passing PATH on. The
SDK's stdio client always merges a few variables (HOME, PATH, USER, ...) into the child's
environment; the spawn therefore goes through ``env -u NAME ... -- /abs/command args`` to drop the
ones the config does not name (values travel in the environment, never on a command line).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

from clawdesk.config_mcp import MCPConfig, MCPServerConfig
from clawdesk.tools.types import ToolResult, ToolSpec

NOT_STARTED, RUNNING, FAILED = "not started", "running", "failed"
MAX_RESULT_CHARS = 100_000  # what the model reads of one result; longer output is cut with a note
_START_GRACE_S = 5.0  # the loop enforces start_timeout_s; this only guards against a wedged loop
_CALL_GRACE_S = 5.0
_CLOSE_TIMEOUT_S = 10.0  # the SDK's shutdown: stdin closed, 2 s, SIGTERM, 2 s, SIGKILL
_STDERR_TAIL_BYTES = 600
_MAX_PAGES = 100  # tools/list pages; a server that keeps paging forever is cut off here


class _StartError(Exception):
    """A server cannot even be spawned (command not found...); the message is the status detail."""


class _Server:
    """One configured server's state. Fields change under MCPServers._lock."""

    def __init__(self, cfg: MCPServerConfig) -> None:
        self.cfg = cfg
        self.state = NOT_STARTED
        self.detail = ""
        self.tools: dict[str, ToolSpec] = {}  # the server's own tool name -> spec
        self.session: Any = None  # mcp.ClientSession while running; used only on the loop thread
        self.future: concurrent.futures.Future[None] | None = None  # the task that runs it
        self.ready = threading.Event()  # set once running or failed
        self.wake: asyncio.Event | None = None  # set to make the running task stop
        self.stopping = False
        self.errlog: IO[bytes] | None = None  # the server's stderr


class MCPServers:
    """The configured MCP servers of one process, started lazily; see the module docstring."""

    def __init__(self, config: MCPConfig, *, cwd: Path | None = None, log_dir: Path | None = None) -> None:
        """``cwd``: the servers' working directory (the tools workspace; default: ClawDesk's own).
        ``log_dir``: where each server's stderr goes (``mcp-NAME.log``, rewritten at every start);
        without one it goes to an anonymous temporary file, read only for failure details."""
        self._servers = {s.name: _Server(s) for s in config.servers}
        self._cwd = cwd
        self._log_dir = log_dir
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def __enter__(self) -> MCPServers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the provider interface -------------------------------------------------------------------

    def specs(self) -> list[ToolSpec]:
        """The tools of every running server, starting those not started yet."""
        self._start(list(self._servers.values()))
        with self._lock:
            return [spec for srv in self._servers.values() if srv.state == RUNNING for spec in srv.tools.values()]

    def status(self) -> list[tuple[str, str, str]]:
        """``(server, state, detail)`` per configured server, in config order; starts nothing."""
        with self._lock:
            return [(name, srv.state, srv.detail) for name, srv in self._servers.items()]

    def call(self, name: str, arguments: dict[str, Any], timeout: float | None = None) -> ToolResult:
        """Run tool ``<server>.<tool>``; ``timeout`` defaults to the server's ``call_timeout_s``."""
        began = time.monotonic()

        def result(status: str, content: str) -> ToolResult:
            return ToolResult(name=name, status=status, content=content, duration_s=time.monotonic() - began)

        server, _, tool = name.partition(".")
        srv = self._servers.get(server)
        if srv is None or not tool:
            configured = ", ".join(self._servers) or "none"
            return result("error", f"No MCP tool named {name!r}: MCP tools are named <server>.<tool> and the "
                          f"configured servers are: {configured}.")  # fmt: skip
        if not isinstance(arguments, dict):
            return result("error", f"The arguments of {name} must be a JSON object, got {type(arguments).__name__}.")
        self._start([srv])
        with self._lock:
            state, detail, known, session = srv.state, srv.detail, dict(srv.tools), srv.session
            loop = self._loop
        if state != RUNNING or session is None or loop is None:
            return result("error", self._not_running(srv, detail or state))
        if tool not in known:
            offers = ", ".join(sorted(known)) or "no tools"
            return result("error", f"MCP server '{server}' has no tool {tool!r}; it offers: {offers}.")
        limit = srv.cfg.call_timeout_s if timeout is None else timeout
        future = asyncio.run_coroutine_threadsafe(self._call(srv, session, tool, arguments, limit), loop)
        try:
            status, content = future.result(limit + _CALL_GRACE_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            status, content = "timeout", f"{name} did not answer within {limit:g} s; the call was cancelled."
        except concurrent.futures.CancelledError:  # close() ran while the call was in flight
            status, content = "error", f"{name} was cancelled: ClawDesk is stopping its MCP servers."
        return result(status, content)

    def close(self) -> None:
        """Stop every server and the loop thread; later calls report the servers as stopped."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
            servers = list(self._servers.values())
        atexit.unregister(self.close)
        if loop is None or thread is None:
            return
        for srv in servers:
            loop.call_soon_threadsafe(self._wake, srv)
        futures = [srv.future for srv in servers if srv.future is not None]
        _, pending = concurrent.futures.wait(futures, timeout=_CLOSE_TIMEOUT_S)
        for future in pending:  # still starting: cancel it; the SDK's shutdown is shielded and kills the group
            future.cancel()
        concurrent.futures.wait(pending, timeout=_CLOSE_TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=_CLOSE_TIMEOUT_S)
        if not thread.is_alive():
            loop.close()
        with self._lock:
            for srv in servers:
                if srv.state == RUNNING or (srv.state == NOT_STARTED and srv.future is not None):
                    srv.state, srv.detail = NOT_STARTED, "stopped"
                srv.session, srv.tools = None, {}
                srv.ready.set()
                if srv.errlog is not None:
                    srv.errlog.close()

    # -- starting ---------------------------------------------------------------------------------

    def _start(self, servers: list[_Server]) -> None:
        """Start those of ``servers`` not started yet and wait until each is running or failed."""
        with self._lock:
            if self._closed:
                for srv in servers:
                    if srv.future is None and srv.state == NOT_STARTED:
                        srv.detail = "stopped"
                return
            fresh = [srv for srv in servers if srv.future is None]
            if fresh:
                loop = self._ensure_loop()
                for srv in fresh:
                    srv.detail = "starting"
                    srv.future = asyncio.run_coroutine_threadsafe(self._serve(srv), loop)
        for srv in servers:
            if not srv.ready.wait(srv.cfg.start_timeout_s + _START_GRACE_S):
                self._fail(srv, f"did not start within {srv.cfg.start_timeout_s:g} s")

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        """The background event loop, started on first use (caller holds the lock)."""
        if self._loop is None:
            # The SDK logs a traceback for a garbage line from a server; that belongs in the app's
            # log if it has one, never on the terminal (Python's last-resort handler prints WARNINGs).
            mcp_log = logging.getLogger("mcp")
            if not any(isinstance(h, logging.NullHandler) for h in mcp_log.handlers):
                mcp_log.addHandler(logging.NullHandler())
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=_run_loop, args=(loop,), name="clawdesk-mcp", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
            atexit.register(self.close)  # a daemon thread dies silently at exit: stop the servers first
        return self._loop

    def _command(self, cfg: MCPServerConfig) -> tuple[str, list[str]]:
        """argv for the spawn: ``env -u ... -- /abs/command args`` (see the module docstring)."""
        from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS

        where = f"mcp.servers.{cfg.name}.command"
        path = shutil.which(cfg.command)
        if path is None:
            raise _StartError(
                f"command {cfg.command!r} was not found or is not executable (looked on ClawDesk's PATH); "
                f"fix {where} in config.toml, an absolute path works best"
            )
        path = os.path.abspath(path)
        if self._cwd is not None and not self._cwd.is_dir():
            raise _StartError(f"its working directory {self._cwd} does not exist (the tools workspace)")
        if "=" in path:  # env(1) would read it as NAME=VALUE
            raise _StartError(f"the path of {where} contains '=' ({path}); move the program or link it elsewhere")
        env_tool = shutil.which("env") or ("/usr/bin/env" if os.path.exists("/usr/bin/env") else None)
        if env_tool is None:
            raise _StartError(
                "the `env` program (needed to start MCP servers with only their own environment) is missing"
            )
        unset = [arg for var in DEFAULT_INHERITED_ENV_VARS if var not in cfg.env for arg in ("-u", var)]
        return env_tool, [*unset, "--", path, *cfg.args]

    async def _serve(self, srv: _Server) -> None:
        """Run one server from spawn to stop (a task on the loop thread)."""
        import anyio
        from mcp import ClientSession, StdioServerParameters, stdio_client
        from mcp.types import Implementation

        from clawdesk import __version__

        srv.wake = asyncio.Event()
        if srv.stopping:
            return self._set_ready(srv)
        deadline = time.monotonic() + srv.cfg.start_timeout_s
        try:
            command, args = self._command(srv.cfg)
            srv.errlog = self._open_errlog(srv.cfg.name)
            params = StdioServerParameters(command=command, args=args, env=dict(srv.cfg.env), cwd=self._cwd)
            async with stdio_client(params, errlog=srv.errlog) as (read, write):  # type: ignore[arg-type]
                # Relay the server's messages through our own stream, to notice when its stdout ends.
                relay_send, relay_receive = anyio.create_memory_object_stream[Any](0)
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._relay, srv, read, relay_send)
                    try:
                        info = Implementation(name="clawdesk", version=__version__)
                        async with ClientSession(relay_receive, write, client_info=info) as session:
                            try:
                                with anyio.fail_after(max(0.0, deadline - time.monotonic())):
                                    await session.initialize()
                                    specs = await _list_tools(session, srv.cfg.name)
                            except Exception as exc:  # anything a server can do is a failed start
                                return self._fail(srv, self._why(srv, exc, "while starting"))
                            if not self._set_running(srv, session, specs):
                                return None
                            await srv.wake.wait()
                    finally:
                        tasks.cancel_scope.cancel()
        except _StartError as exc:
            self._fail(srv, str(exc))
        except OSError as exc:
            what = f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
            self._fail(srv, f"could not be started: {what}; check mcp.servers.{srv.cfg.name}.command")
        except Exception as exc:  # a server must never take the chat down: recorded as failed
            self._fail(srv, self._why(srv, exc, "while running"))
        finally:
            with self._lock:
                srv.session = None
            self._set_ready(srv)
        return None

    async def _relay(self, srv: _Server, source: Any, sink: Any) -> None:
        """Forward the server's messages to the session; their end means the server went away."""
        import anyio

        try:
            async with sink:
                async for item in source:
                    await sink.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # our own shutdown closed one end: not a death
        if not srv.stopping:
            self._fail(srv, "exited" + self._stderr_tail(srv))
            if srv.wake is not None:
                srv.wake.set()

    # -- calling ----------------------------------------------------------------------------------

    async def _call(
        self, srv: _Server, session: Any, tool: str, arguments: dict[str, Any], limit: float
    ) -> tuple[str, str]:
        """One tools/call on the loop thread -> (status, content)."""
        import anyio
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        name = f"{srv.cfg.name}.{tool}"
        timed_out = ("timeout", f"{name} did not answer within {limit:g} s; the call was cancelled.")
        try:
            with anyio.fail_after(limit + 1.0):  # the SDK's own read timeout (with a cancel to the server) comes first
                result = await session.call_tool(tool, arguments, read_timeout_seconds=limit)
        except TimeoutError:
            return timed_out
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                return timed_out
            if exc.code == CONNECTION_CLOSED:
                if not srv.stopping:
                    self._fail(srv, "exited" + self._stderr_tail(srv))
                with self._lock:
                    detail = srv.detail
                return "error", self._not_running(srv, detail, during=name)
            return "error", f"MCP server '{srv.cfg.name}' rejected the call to {tool!r}: {exc.message}"
        except Exception as exc:  # e.g. a result breaking the protocol: the model reads it
            return "error", f"MCP server '{srv.cfg.name}' gave no usable answer to {tool!r}: {_describe(exc)}"
        text = _result_text(result)
        return ("error" if result.is_error else "ok"), text

    # -- state ------------------------------------------------------------------------------------

    def _set_running(self, srv: _Server, session: Any, specs: dict[str, ToolSpec]) -> bool:
        with self._lock:
            if srv.state == FAILED or srv.stopping:  # the synchronous side gave up on it meanwhile
                return False
            srv.state, srv.session, srv.tools = RUNNING, session, specs
            names = ", ".join(sorted(specs)) or "none"
            srv.detail = f"{len(specs)} tool{'s' if len(specs) != 1 else ''}: {names}"
        srv.ready.set()
        return True

    def _fail(self, srv: _Server, detail: str) -> None:
        with self._lock:
            if srv.state != FAILED:
                srv.state, srv.detail = FAILED, detail
            srv.session, srv.tools = None, {}
            loop = self._loop
        srv.ready.set()
        if loop is not None and not loop.is_closed():  # a server given up on must not keep running
            # RuntimeError: the loop closed between the check and the call, nothing is left to wake.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._wake, srv)

    def _set_ready(self, srv: _Server) -> None:
        srv.ready.set()

    @staticmethod
    def _wake(srv: _Server) -> None:
        """On the loop thread: make the server's task stop."""
        srv.stopping = True
        if srv.wake is not None:
            srv.wake.set()

    def _not_running(self, srv: _Server, detail: str, during: str = "") -> str:
        name = srv.cfg.name
        where = f" during {during}" if during else ""
        log = f", its log {self._log_dir / f'mcp-{name}.log'}" if self._log_dir is not None else ""
        return (
            f"MCP server '{name}' is not available{where} ({detail}). Check [mcp.servers.{name}] in "
            f"config.toml (command, args, env){log}, then restart ClawDesk; `clawdesk tools` shows its state."
        )

    def _why(self, srv: _Server, exc: BaseException, when: str) -> str:
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED

        leaf = _leaf(exc)
        if isinstance(leaf, TimeoutError):
            return f"did not answer the MCP handshake within {srv.cfg.start_timeout_s:g} s" + self._stderr_tail(srv)
        if isinstance(leaf, MCPError) and leaf.code == CONNECTION_CLOSED:
            return f"exited {when}" + self._stderr_tail(srv)
        return f"failed {when}: {_describe(leaf)}" + self._stderr_tail(srv)

    def _open_errlog(self, name: str) -> IO[bytes]:
        if self._log_dir is not None:
            self._log_dir.mkdir(parents=True, exist_ok=True)
            return open(self._log_dir / f"mcp-{name}.log", "w+b")  # read back for failure details  # closed by close()
        return tempfile.TemporaryFile()  # closed by close()

    @staticmethod
    def _stderr_tail(srv: _Server) -> str:
        """``: <last lines the server wrote to stderr>``, or nothing."""
        if srv.errlog is None or srv.errlog.closed:
            return ""
        try:
            fd = srv.errlog.fileno()
            size = os.fstat(fd).st_size
            data = os.pread(fd, _STDERR_TAIL_BYTES, max(0, size - _STDERR_TAIL_BYTES))
        except OSError:
            return ""
        lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
        return f"; its stderr ends: {' | '.join(lines[-3:])}" if lines else ""


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()


async def _list_tools(session: Any, server: str) -> dict[str, ToolSpec]:
    """Every tool the server lists (following pages), as ToolSpecs named ``<server>.<tool>``."""
    from mcp.types import PaginatedRequestParams

    specs: dict[str, ToolSpec] = {}
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        listing = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        for tool in listing.tools:
            specs[tool.name] = ToolSpec(
                name=f"{server}.{tool.name}",
                description=tool.description or tool.title or "",
                parameters=dict(tool.input_schema or {"type": "object", "properties": {}}),
                source=f"mcp:{server}",
                default_policy="ask",
            )
        cursor = listing.next_cursor
        if not cursor:
            break
    return specs


def _result_text(result: Any) -> str:
    """What the model reads of a CallToolResult: text joined, anything else summarised in brackets."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            size = len(block.data) * 3 // 4  # base64
            parts.append(f"[{kind} content: {block.mime_type}, about {size} bytes, not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {block.uri}" + (f" ({block.name})" if block.name else "") + "]")
        elif kind == "resource":
            text = getattr(block.resource, "text", None)
            mime = block.resource.mime_type or "unknown type"
            parts.append(text if text is not None else f"[binary resource {block.resource.uri}, {mime}, not shown]")
        else:
            parts.append(f"[{kind or type(block).__name__} content, not shown]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n[… cut: the result had {len(text)} characters]"
    return text


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside the exception groups anyio's task groups wrap errors in."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__
