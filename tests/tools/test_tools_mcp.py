"""MCP servers as a tool provider: real stdio servers (written here with the ``mcp`` package's
MCPServer, run with this interpreter) behind ``clawdesk.tools.mcp.MCPServers``, and the
``[mcp.servers.NAME]`` config tables."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from clawdesk.config import load_config
from clawdesk.config_mcp import MCPConfig, MCPServerConfig
from clawdesk.errors import ConfigError
from clawdesk.tools.mcp import FAILED, NOT_STARTED, RUNNING, MCPServers
from clawdesk.tools.types import ToolSpec

SERVER = '''
import json, os, sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

if os.environ.get("MCP_TEST_MARKER"):  # proves when (and whether) the server was started, and its pid
    Path(os.environ["MCP_TEST_MARKER"]).write_text(str(os.getpid()))

app = MCPServer("clawdesk-test")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def refuse(reason: str) -> str:
    """Always fails, saying why."""
    raise ToolError("cannot do that: " + reason)


@app.tool()
def environment() -> str:
    """The server's whole environment."""
    return json.dumps(dict(os.environ))


@app.tool()
def where() -> str:
    """The server's working directory."""
    return os.getcwd()


@app.tool()
def picture() -> list:
    """A caption and a 300-byte PNG."""
    return ["a red dot", Image(data=b"\\x89PNG" + bytes(296), format="png")]


@app.tool()
async def slow(seconds: float) -> str:
    """Answers after a while."""
    await anyio.sleep(seconds)
    return "done"


@app.tool()
def exit_now() -> str:
    """The server dies mid-call."""
    os._exit(3)


app.run()
'''

# Never answers the MCP handshake and ignores SIGTERM: only the SIGKILL to its group stops it.
HUNG = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(60)
"""
HUNG_FOR_S = 60


@pytest.fixture(scope="module")
def server_script(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("mcp") / "server.py"
    path.write_text(SERVER)
    return path


def _server(name: str, script: Path | str, **kw) -> MCPServerConfig:
    return MCPServerConfig(name=name, command=sys.executable, args=(str(script),), **kw)


def _gone(pid: int) -> bool:
    """Exited and reaped (a zombie still counts as left behind)."""
    return not psutil.pid_exists(pid)


@pytest.fixture(scope="module")
def calc(server_script):
    """One healthy server ``calc`` and one whose command does not exist, in the same manager."""
    servers = MCPServers(
        MCPConfig(servers=(_server("calc", server_script), MCPServerConfig(name="ghost", command="no-such-mcp-server")))
    )
    yield servers
    servers.close()


def test_tools_are_listed_as_specs_with_the_servers_schemas(calc):
    specs = {spec.name: spec for spec in calc.specs()}
    assert set(specs) == {f"calc.{t}" for t in ("add", "refuse", "environment", "where", "picture", "slow", "exit_now")}
    add = specs["calc.add"]
    assert isinstance(add, ToolSpec)
    assert (add.source, add.default_policy, add.description) == ("mcp:calc", "ask", "Add two integers.")
    assert add.parameters["required"] == ["a", "b"]
    assert add.parameters["properties"]["a"]["type"] == "integer"
    assert add.schema()["function"]["parameters"] is add.parameters


def test_a_missing_command_fails_that_server_only(calc):
    calc.specs()
    status = {name: (state, detail) for name, state, detail in calc.status()}
    assert status["calc"][0] == RUNNING
    state, detail = status["ghost"]
    assert state == FAILED
    assert "no-such-mcp-server" in detail and "not found" in detail and "mcp.servers.ghost.command" in detail
    result = calc.call("ghost.anything", {})
    assert result.status == "error"
    assert "'ghost'" in result.content and "[mcp.servers.ghost]" in result.content
    assert calc.call("calc.add", {"a": 2, "b": 3}).status == "ok"  # the other server is unaffected


def test_a_call_returns_the_tools_text(calc):
    result = calc.call("calc.add", {"a": 2, "b": 40})
    assert (result.name, result.status, result.content) == ("calc.add", "ok", "42")
    assert result.duration_s > 0


def test_non_text_content_is_summarised_not_dumped(calc):
    result = calc.call("calc.picture", {})
    assert result.status == "ok"
    assert result.content == "a red dot\n[image content: image/png, about 300 bytes, not shown]"


def test_a_failing_tool_gives_an_error_result_with_its_message(calc):
    result = calc.call("calc.refuse", {"reason": "the disk is read-only"})
    assert result.status == "error"
    assert "cannot do that: the disk is read-only" in result.content  # MCPServer prefixes "Error executing tool"


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("calc.nope", {}, "has no tool 'nope'; it offers: add, environment, exit_now, picture, refuse, slow, where"),
        ("nope.add", {}, "configured servers are: calc, ghost"),
        ("calc", {}, "named <server>.<tool>"),
        ("calc.add", ["a", 1], "must be a JSON object"),
        ("calc.add", {"a": "two"}, "validation error"),  # the server's own argument check
    ],
)
def test_bad_calls_give_error_results_the_model_can_read(calc, name, arguments, expected):
    result = calc.call(name, arguments)
    assert result.status == "error"
    assert expected in result.content


def test_a_call_past_its_timeout_is_a_timeout_and_the_server_lives_on(calc):
    asked_for = 30.0
    began = time.monotonic()
    result = calc.call("calc.slow", {"seconds": asked_for}, timeout=0.5)
    assert result.status == "timeout"
    assert "calc.slow" in result.content and "0.5 s" in result.content
    assert time.monotonic() - began < asked_for / 4
    assert calc.call("calc.add", {"a": 1, "b": 1}).content == "2"


def test_the_server_runs_in_the_workspace_with_only_its_configured_environment(server_script, tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWDESK_PARENT_SECRET", "must-not-leak")
    exe = Path(sys.executable)
    # The command is a bare name found on ClawDesk's PATH; PATH itself is not passed on.
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert "HOME" in os.environ or "USER" in os.environ  # there is something that could leak
    # PYTHONCOERCECLOCALE=0: otherwise the child interpreter adds LC_CTYPE to its own environment.
    env = {"ONLY_THIS": "yes", "PYTHONCOERCECLOCALE": "0"}
    cfg = MCPServerConfig(name="envy", command=exe.name, args=(str(server_script),), env=env)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with MCPServers(MCPConfig(servers=(cfg,)), cwd=workspace) as servers:
        result = servers.call("envy.environment", {})
        assert servers.call("envy.where", {}).content == str(workspace)
    assert result.status == "ok", result.content
    seen = json.loads(result.content)
    seen.pop("__CF_USER_TEXT_ENCODING", None)  # macOS adds this to every process
    assert seen == env


def test_a_server_that_dies_mid_session_gives_errors_naming_it(server_script):
    with MCPServers(MCPConfig(servers=(_server("fragile", server_script),))) as servers:
        assert servers.call("fragile.add", {"a": 1, "b": 2}).status == "ok"
        result = servers.call("fragile.exit_now", {})
        assert result.status == "error"
        assert "MCP server 'fragile'" in result.content and "exited" in result.content
        [(name, state, detail)] = servers.status()
        assert (name, state) == ("fragile", FAILED) and "exited" in detail
        after = servers.call("fragile.add", {"a": 1, "b": 2})
        assert after.status == "error" and "[mcp.servers.fragile]" in after.content
        assert servers.specs() == []


def test_a_missing_workspace_fails_the_server_with_a_clear_detail(server_script, tmp_path):
    with MCPServers(MCPConfig(servers=(_server("calc", server_script),)), cwd=tmp_path / "nowhere") as servers:
        assert servers.specs() == []
        [(_, state, detail)] = servers.status()
    assert state == FAILED and f"working directory {tmp_path / 'nowhere'} does not exist" in detail


def test_a_server_that_exits_at_start_is_failed_with_its_stderr(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text("import sys\nprint('missing API token for the weather service', file=sys.stderr)\nsys.exit(2)\n")
    logs = tmp_path / "logs"
    with MCPServers(MCPConfig(servers=(_server("weather", script),)), log_dir=logs) as servers:
        assert servers.specs() == []
        [(_, state, detail)] = servers.status()
        assert state == FAILED
        assert "exited" in detail and "missing API token for the weather service" in detail
        result = servers.call("weather.forecast", {})
        assert result.status == "error" and str(logs / "mcp-weather.log") in result.content
    assert "missing API token" in (logs / "mcp-weather.log").read_text()


def test_a_server_that_never_answers_fails_within_its_start_timeout_and_is_killed(tmp_path):
    pid_file = tmp_path / "hung.pid"
    cfg = MCPServerConfig(name="hung", command=sys.executable, args=("-c", HUNG, str(pid_file)), start_timeout_s=1.5)
    servers = MCPServers(MCPConfig(servers=(cfg,)))
    began = time.monotonic()
    assert servers.specs() == []
    assert time.monotonic() - began < HUNG_FOR_S / 4
    [(_, state, detail)] = servers.status()
    assert state == FAILED and "did not answer the MCP handshake within 1.5 s" in detail
    pid = int(pid_file.read_text())
    servers.close()  # it ignores SIGTERM: only the SIGKILL to its process group ends it
    assert _gone(pid)


def test_servers_start_lazily_and_close_leaves_no_process(server_script, tmp_path):
    marker = tmp_path / "started.pid"
    cfg = _server("lazy", server_script, env={"MCP_TEST_MARKER": str(marker)})
    threads_before = set(threading.enumerate())
    servers = MCPServers(MCPConfig(servers=(cfg,)))
    assert servers.status() == [("lazy", NOT_STARTED, "")]
    assert not marker.exists()
    assert set(threading.enumerate()) == threads_before  # no loop thread until a server is needed
    assert [spec.name for spec in servers.specs()][:1] == ["lazy.add"]
    pid = int(marker.read_text())
    assert pid in {child.pid for child in psutil.Process().children(recursive=True)}
    servers.close()
    assert _gone(pid)
    assert servers.status() == [("lazy", NOT_STARTED, "stopped")]
    assert servers.call("lazy.add", {"a": 1, "b": 1}).status == "error"
    assert set(threading.enumerate()) <= threads_before


def _write_config(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(text)


def test_config_reads_mcp_server_tables(home):
    _write_config(
        home,
        """
[mcp.servers.files]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]
env = { NODE_OPTIONS = "--max-old-space-size=256" }
start_timeout_s = 45

[mcp.servers.git-tools]
command = "/usr/local/bin/mcp-git"
""",
    )
    servers = load_config(home).mcp.servers
    assert [s.name for s in servers] == ["files", "git-tools"]
    files = servers[0]
    assert files.args == ("-y", "@modelcontextprotocol/server-filesystem", "/tmp")
    assert files.env == {"NODE_OPTIONS": "--max-old-space-size=256"}
    assert (files.start_timeout_s, files.call_timeout_s) == (45, 60.0)
    assert servers[1].args == () and servers[1].env == {}
    assert load_config(home.parent / "elsewhere").mcp == MCPConfig()


@pytest.mark.parametrize(
    ("toml", "named"),
    [
        ('[mcp.servers.x]\ncommand = ""\n', "mcp.servers.x.command must not be empty"),
        ('[mcp.servers.x]\nargs = ["a"]\n', "mcp.servers.x.command is missing"),
        ('[mcp.servers.x]\ncommand = "a"\nargs = "--flag"\n', "mcp.servers.x.args must be a list of strings"),
        ('[mcp.servers.x]\ncommand = "a"\nargs = [1]\n', "mcp.servers.x.args must be a list of strings"),
        ('[mcp.servers.x]\ncommand = "a"\nenv = { A = 1 }\n', "mcp.servers.x.env must be a table of strings"),
        ('[mcp.servers.x]\ncommand = "a"\nenv = { "A-B" = "1" }\n', "mcp.servers.x.env: 'A-B' is not a valid"),
        ('[mcp.servers.x]\ncommand = "a"\nstart_timeout_s = 0\n', "mcp.servers.x.start_timeout_s must be in"),
        ('[mcp.servers.x]\ncommand = "a"\ncall_timeout_s = true\n', "mcp.servers.x.call_timeout_s must be a number"),
        ('[mcp.servers.x]\ncommand = "a"\ncwd = "/"\n', "unknown key(s) in [mcp.servers.x]: cwd"),
        ('[mcp.servers."a.b"]\ncommand = "a"\n', "mcp.servers.a.b: a server name may use only"),
        ("[mcp.servers]\nx = 1\n", "mcp.servers.x must be a table"),
        ("[mcp]\nserver = 1\n", "unknown key(s) in [mcp]: server"),
    ],
)
def test_config_errors_name_the_server_and_key(home, toml, named):
    _write_config(home, toml)
    with pytest.raises(ConfigError) as err:
        load_config(home)
    assert named in str(err.value)
    assert str(home / "config.toml") in str(err.value)
