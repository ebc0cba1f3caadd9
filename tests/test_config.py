from pathlib import Path

import pytest

from clawdesk.config import ChatConfig, ModelConfig, TrainConfig, default_home, load_config
from clawdesk.errors import ConfigError


def test_defaults_without_file(tmp_path):
    cfg = load_config(tmp_path)
    assert cfg.model.name == "qwen3-4b"
    assert cfg.db_path == tmp_path / "clawdesk.db"
    assert cfg.train.batch_size == 8 and cfg.judge.votes == 3


def test_file_values_and_overrides(tmp_path):
    (tmp_path / "config.toml").write_text("[chat]\ntemperature = 0.2\n[train]\nbatch_size = 2\n")
    cfg = load_config(tmp_path, train__batch_size=4, model__name=None)
    assert cfg.chat.temperature == 0.2
    assert cfg.train.batch_size == 4  # CLI override beats the file
    assert cfg.model.name == "qwen3-4b"  # None overrides are ignored


@pytest.mark.parametrize(
    "text, needle",
    [
        ("[chat]\ntemperature = 5.0\n", "chat.temperature"),
        ("[chat]\nrepeat_stop = 8\n", "chat.repeat_stop must be 0 (off) or >= 16 tokens, got 8"),
        ("[chat]\ntemprature = 0.5\n", "unknown key(s) in [chat]: temprature"),
        ("[bogus]\nx = 1\n", "unknown section(s) bogus"),
        ("[chat\n", "not valid TOML"),
        ("[train]\nbatch_size = 'many'\n", "train"),
    ],
)
def test_bad_config_names_file_and_key(tmp_path, text, needle):
    (tmp_path / "config.toml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert needle in str(info.value)
    assert str(tmp_path / "config.toml") in str(info.value)


def test_dataclasses_validate_in_post_init():
    with pytest.raises(ValueError):
        ModelConfig(n_ctx=10)
    with pytest.raises(ValueError):
        ChatConfig(top_p=0)
    with pytest.raises(ValueError):
        TrainConfig(batch_size=0)
    with pytest.raises(ValueError, match="max_ppl_ratio"):
        TrainConfig(max_ppl_ratio=0.9)  # below 1 would reject an unchanged adapter; 0 is "off"
    assert TrainConfig(max_ppl_ratio=0).max_ppl_ratio == 0
    assert ChatConfig().repeat_stop == 64 and ChatConfig(repeat_stop=0).repeat_stop == 0  # 0: loops run to the limit


def test_home_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWDESK_HOME", str(tmp_path / "env"))
    assert default_home(None) == (tmp_path / "env").resolve()
    assert default_home(tmp_path / "flag") == (tmp_path / "flag").resolve()
    monkeypatch.delenv("CLAWDESK_HOME")
    assert "clawdesk" in str(default_home(None)).lower()
    assert isinstance(default_home(None), Path)


def test_tool_names_and_policies_in_config_are_the_tools_own():
    """config.py imports no stage, so it keeps the built-in tool names as data: they must be the tools' own."""
    from clawdesk.config import BUILTIN_TOOL_NAMES, TOOL_POLICIES, ToolsConfig
    from clawdesk.tools.builtins import BUILTIN_NAMES
    from clawdesk.tools.types import POLICIES

    assert BUILTIN_TOOL_NAMES == BUILTIN_NAMES
    assert TOOL_POLICIES == POLICIES
    for name in BUILTIN_NAMES:
        assert ToolsConfig(policy={name: "never"}).policy == {name: "never"}
    with pytest.raises(ValueError, match="no built-in tool 'read_files'"):
        ToolsConfig(policy={"read_files": "ask"})
