"""The workspace jail: every way out (``..``, absolute, ``~``, NUL, symlinks, a symlinked parent) is refused, on
real files, and nothing is ever written outside — checked on the resolver and through the tools themselves."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clawdesk.errors import ToolInputError
from clawdesk.tools.builtins import BuiltinTools
from clawdesk.tools.consent import Consent
from clawdesk.tools.jail import Workspace, is_inside
from clawdesk.tools.registry import Registry
from clawdesk.tools.types import ToolCall

SECRET = "top secret outside the workspace"


def _sandbox(base: Path) -> tuple[Path, Path]:
    """A workspace next to an 'outside' dir, with every kind of link that leads out."""
    ws, out = base / "ws", base / "outside"
    (ws / "sub").mkdir(parents=True)
    out.mkdir()
    (out / "secret.txt").write_text(SECRET)
    (ws / "sub" / "inside.txt").write_text("inside\n")
    (ws / "file_link").symlink_to(out / "secret.txt")  # a file link out
    (ws / "dir_link").symlink_to(out)  # a directory link out
    (ws / "dangling").symlink_to(out / "not_yet.txt")  # a dangling link out: writing it would create the file
    (ws / "sub" / "up").symlink_to("../..")  # a relative link that climbs out
    (ws / "ok_link").symlink_to("sub/inside.txt")  # a link that stays inside: refused too (never followed)
    return ws, out


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture
def sandbox(tmp_path):
    return _sandbox(tmp_path)


ESCAPES = [
    "..",
    "../outside/secret.txt",
    "sub/../../outside/secret.txt",
    "~/secret.txt",
    "file_link",
    "dir_link/secret.txt",
    "dir_link/new.txt",  # a new file under a symlinked parent
    "dangling",
    "sub/up/outside/secret.txt",
    "dir_link/../outside/secret.txt",  # `..` after a link climbs from its target: only the real path shows it
    "sub/inside.txt\x00.png",
]


@pytest.mark.parametrize("path", ESCAPES)
def test_resolve_refuses_every_way_out(sandbox, path):
    ws, _ = sandbox
    with pytest.raises(ToolInputError) as err:
        Workspace(ws).resolve(path)
    text = str(err.value)
    assert "outside the workspace" in text or "NUL" in text
    assert "workspace" in text  # the model is told what to do: use a path inside it


def test_absolute_paths_outside_are_refused_and_inside_allowed(sandbox):
    ws, out = sandbox
    jail = Workspace(ws)
    with pytest.raises(ToolInputError, match="outside the workspace"):
        jail.resolve(str(out / "secret.txt"))
    with pytest.raises(ToolInputError, match="outside the workspace"):
        jail.resolve("/etc/passwd")
    assert jail.resolve(str(ws / "sub" / "inside.txt")) == ws / "sub" / "inside.txt"
    assert jail.resolve("./sub/../sub/inside.txt") == ws / "sub" / "inside.txt"
    with pytest.raises(ToolInputError, match="symbolic link"):
        jail.resolve("ok_link")  # no link is followed, not even one that stays inside
    assert jail.resolve("") == jail.resolve(".") == ws


def test_workspace_reached_through_a_symlink_still_works(tmp_path):
    real = tmp_path / "real_ws"
    real.mkdir()
    (tmp_path / "ws_alias").symlink_to(real)
    jail = Workspace(tmp_path / "ws_alias")
    assert jail.resolve("a/b.txt") == real / "a" / "b.txt"
    assert jail.resolve(str(tmp_path / "ws_alias" / "a.txt")) == real / "a.txt"  # absolute, spelled via the alias
    with pytest.raises(ToolInputError):
        jail.resolve("../real_ws/../x")


def _registry(ws: Path, db: Path) -> Registry:
    tools = BuiltinTools(Workspace(ws), db, read_max_bytes=4000, output_max_chars=8000)
    return Registry([tools], timeout_s=5)


@pytest.mark.parametrize("path", ESCAPES)
def test_tools_write_nothing_outside_and_read_nothing_from_outside(sandbox, tmp_path, path):
    ws, out = sandbox
    before = _tree(out)
    registry = _registry(ws, tmp_path / "db.sqlite")
    yes = Consent(yes=True)
    calls = [
        ToolCall("write_file", {"path": path, "content": "pwned"}),
        ToolCall("edit_file", {"path": path, "old_text": "top secret", "new_text": "pwned"}),
        ToolCall("read_file", {"path": path}),
        ToolCall("list_files", {"path": path}),
        ToolCall("search_files", {"pattern": "secret", "path": path}),
    ]
    for call in calls:
        result = registry.run(call, yes)
        assert result.status == "error", (call, result)
        assert SECRET not in result.content
    assert _tree(out) == before
    assert not (out / "not_yet.txt").exists() and not (out / "new.txt").exists()


def test_search_does_not_follow_links_out_of_the_workspace(sandbox, tmp_path):
    ws, _ = sandbox
    result = _registry(ws, tmp_path / "db.sqlite").run(
        ToolCall("search_files", {"pattern": "secret|inside"}), Consent()
    )
    assert result.status == "ok"
    assert "sub/inside.txt:1: inside" in result.content
    assert SECRET not in result.content


def test_a_fifo_in_the_workspace_does_not_hang_read_file(sandbox, tmp_path):
    ws, _ = sandbox
    os.mkfifo(ws / "pipe")
    result = _registry(ws, tmp_path / "db.sqlite").run(ToolCall("read_file", {"path": "pipe"}), Consent())
    assert result.status == "error" and "not a regular file" in result.content


SEGMENTS = ["..", ".", "sub", "up", "dir_link", "file_link", "dangling", "ok_link", "new", "", "~", "/", "\x00"]


def test_no_generated_path_resolves_outside():
    """Property: whatever path is built from these pieces, resolve() refuses it or returns a real path inside."""
    with tempfile.TemporaryDirectory() as base:
        ws, out = _sandbox(Path(base))
        jail = Workspace(ws)
        before = _tree(out)
        tools = BuiltinTools(jail, Path(base) / "db.sqlite", read_max_bytes=4000, output_max_chars=8000)

        @settings(max_examples=300, deadline=None)
        @given(st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=6), st.booleans())
        def check(parts, absolute):
            path = ("/" if absolute else "") + "/".join(parts)
            try:
                real = jail.resolve(path)
            except ToolInputError:
                return
            assert is_inside(Path(os.path.realpath(real)), ws.resolve())
            tools.call("write_file", {"path": path, "content": "x"}, 5)  # may be an error result, never a write out
            assert _tree(out) == before

        check()
