"""``clawdesk tools`` and ``clawdesk tools call``: listing, exit codes, headless consent, ``--workspace``, and the
``[tools]`` config section's errors naming the key."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from clawdesk.cli import main
from clawdesk.config import Config, ToolsConfig, load_config
from clawdesk.errors import ConfigError


def _config(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(text)


def call(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["tools", "call", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_tools_lists_every_tool_with_policy_and_source(home, capsys):
    _config(home, '[tools.policy]\nrun_shell = "never"\n')
    assert main(["tools"]) == 0
    out = capsys.readouterr().out
    assert f"workspace: {home / 'workspace'}" in out
    rows = {line.split()[0]: line.split()[1:4] for line in out.splitlines()[2:]}
    assert rows["read_file"] == ["auto", "default", "builtin"]
    assert rows["write_file"] == ["ask", "default", "builtin"]
    assert rows["run_shell"] == ["never", "config", "builtin"]
    assert set(rows) >= {"list_files", "search_files", "edit_file", "current_time", "remember", "recall"}


def test_call_runs_a_tool_in_the_default_workspace(home, capsys):
    code, out, err = call(capsys, "write_file", '{"path": "hello.txt", "content": "hi\\n"}', "--yes")
    assert code == 0 and out.startswith("created hello.txt") and "[write_file: ok" in err
    assert (home / "workspace" / "hello.txt").read_text() == "hi\n"
    code, out, _ = call(capsys, "read_file", '{"path": "hello.txt"}')
    assert code == 0 and out == "hi\n\n"


def test_ask_without_consent_is_denied_with_exit_3_and_nothing_written(home, capsys):
    code, out, err = call(capsys, "write_file", '{"path": "x.txt", "content": "x"}')
    assert code == 3 and "--yes or --allow write_file" in out and "[write_file: denied" in err
    assert not (home / "workspace" / "x.txt").exists()


def test_never_stays_never_with_yes(home, capsys):
    _config(home, '[tools.policy]\nwrite_file = "never"\n')
    code, out, _ = call(capsys, "write_file", '{"path": "x.txt", "content": "x"}', "--yes")
    assert code == 3 and "policy never" in out and not (home / "workspace" / "x.txt").exists()


def test_allow_list(home, capsys):
    code, _, _ = call(capsys, "run_shell", '{"command": "touch made.txt"}', "--allow", "write_file,run_shell")
    assert code == 0 and (home / "workspace" / "made.txt").exists()
    code, _, _ = call(
        capsys, "edit_file", '{"path": "made.txt", "old_text": "a", "new_text": "b"}', "--allow", "run_shell"
    )
    assert code == 3
    code, _, err = call(capsys, "run_shell", '{"command": "true"}', "--allow", "run_shel")
    assert (
        code == 2 and err.startswith("clawdesk: error: --allow names no tool called run_shel") and err.count("\n") == 1
    )


def test_error_results_exit_1_and_bad_json_exits_2(home, capsys):
    code, out, _ = call(capsys, "read_file", '{"path": "../../etc/passwd"}')
    assert code == 1 and "outside the workspace" in out
    code, out, _ = call(capsys, "run_shell", '{"command": "exit 4"}', "--yes")
    assert code == 1 and out.startswith("exit code 4")
    code, out, _ = call(capsys, "no_such_tool")
    assert code == 1 and "there is no tool called 'no_such_tool'" in out
    for bad in ("{path: 1}", '["a"]'):
        code, out, err = call(capsys, "read_file", bad)
        assert code == 2 and out == "" and err.startswith("clawdesk: error: JSON-ARGS") and err.count("\n") == 1


def test_workspace_flag(home, tmp_path, capsys):
    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    code, _, _ = call(capsys, "write_file", '{"path": "a.txt", "content": "x"}', "--yes", "--workspace", str(elsewhere))
    assert code == 0 and (elsewhere / "a.txt").exists() and not (home / "workspace" / "a.txt").exists()
    code, _, err = call(capsys, "list_files", "{}", "--workspace", str(tmp_path / "missing"))
    assert code == 2 and "--workspace" in err and "no such directory" in err
    assert main(["tools", "--workspace", str(elsewhere)]) == 0
    assert f"workspace: {elsewhere}" in capsys.readouterr().out


def test_tools_off_refuses_calls(home, capsys):
    _config(home, "[tools]\nenabled = false\n")
    code, _, err = call(capsys, "current_time")
    assert code == 2 and "tools.enabled = false" in err
    assert main(["tools"]) == 0 and "tools are OFF" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('[tools.policy]\nrun_shel = "auto"\n', "tools.policy.run_shel"),
        ('[tools.policy]\nrun_shell = "yes"\n', "tools.policy.run_shell"),
        ('[tools]\npolicy = "auto"\n', "tools.policy must be a table"),
        ('[tools.policy]\n"files.read" = "auto"\n', "tools.policy.\"files.read\": there is no MCP server 'files'"),
        ("[tools]\nmax_steps = 0\n", "tools.max_steps"),
        ('[tools]\nshell_timeout_s = "30"\n', "tools.shell_timeout_s"),
        ("[tools]\nsandbox = true\n", "unknown key(s) in [tools]: sandbox"),
    ],
)
def test_config_errors_name_the_key(home, capsys, toml, key):
    _config(home, toml)
    with pytest.raises(ConfigError, match=r"config\.toml") as err:
        load_config(home)
    assert key in str(err.value)
    assert main(["tools"]) == 2
    err_text = capsys.readouterr().err
    assert err_text.startswith("clawdesk: error: ") and key in err_text and err_text.count("\n") == 1


def test_config_policy_and_workspace(home, tmp_path):
    _config(home, '[tools]\nworkspace = "desk"\nshell_timeout_s = 5\n[tools.policy]\nrun_shell = "auto"\n')
    config = load_config(home)
    assert config.tools.policy == {"run_shell": "auto"} and config.tools.shell_timeout_s == 5
    assert config.workspace_dir == home / "desk"
    assert Config(home=home).workspace_dir == home / "workspace"
    absolute = Config(home=home, tools=ToolsConfig(workspace=str(tmp_path / "abs")))
    assert absolute.workspace_dir == tmp_path / "abs"


def test_a_real_process_exits_with_the_result_status(home, tmp_path):
    """End to end in a subprocess: the console entry point, the jail, the shell's exit code and stdout."""
    env = {"CLAWDESK_HOME": str(home), "PATH": "/usr/bin:/bin"}

    def clawdesk(*argv: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "clawdesk", "tools", "call", *argv]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)

    done = clawdesk("run_shell", json.dumps({"command": "echo hi from $(basename $PWD)"}), "--yes")
    assert done.returncode == 0 and done.stdout == "exit code 0\nhi from workspace\n\n"
    target = tmp_path / "should-not-exist"
    refused = clawdesk("run_shell", json.dumps({"command": f"touch {target}"}))
    assert refused.returncode == 3 and "[run_shell: denied" in refused.stderr and "Traceback" not in refused.stderr
    assert not target.exists()
