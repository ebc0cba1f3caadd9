"""`clawdesk backup` / `clawdesk restore`: a consistent copy while the app writes, a strict restore.

Real SQLite files, real tar.gz archives, a real GGUF LoRA served by the real llama.cpp engine on
the bundled SmolLM2 (the `engine` fixture, whose base sha256 is "test-sha"). Hostile archives are
built with tarfile by hand.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import stat
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from clawdesk.backup import copy_database, create_backup, restore_backup
from clawdesk.cli import main
from clawdesk.config import Config
from clawdesk.engine import SamplingParams
from clawdesk.errors import InputError, NotFoundError, StoreError
from clawdesk.gguf.lora import write_gguf_lora
from clawdesk.reload import AdapterSwitch, active_version
from clawdesk.runtime import open_store
from clawdesk.store import NewTurn, Store, now_iso

GREEDY = SamplingParams(temperature=0.0, max_tokens=8)


def _turn(text: str) -> NewTurn:
    at = now_iso()
    return NewTurn(
        user_content=text, reply_content=f"reply to {text}", reply_thinking="", status="finished", thinking=False,
        model_name="smollm2-135m", model_path="/m.gguf", model_sha256="test-sha", prompt_ids=[1, 2, 3],
        reply_ids=[4, 5], started_at=at, finished_at=at,
    )  # fmt: skip


def _lora(path: Path, seed: int = 0) -> None:
    """A real GGUF LoRA for SmolLM2-135M (30 layers, hidden 576, 3 KV heads of 64) on q_proj and v_proj."""
    rng = np.random.default_rng(seed)
    state = {}
    for i in range(30):
        for name, d_out in (("q_proj", 576), ("v_proj", 192)):
            key = f"base_model.model.model.layers.{i}.self_attn.{name}"
            state[f"{key}.lora_A.weight"] = rng.normal(0, 0.05, (4, 576)).astype(np.float32)
            state[f"{key}.lora_B.weight"] = rng.normal(0, 0.05, (d_out, 4)).astype(np.float32)
    write_gguf_lora(state, path, arch="llama", alpha=8, rank=4, n_head=9, n_head_kv=3)


def _data_dir(config: Config) -> Store:
    """Two chats, a ready adapter v1 (active), a config.toml and the leftovers a backup must skip."""
    config.home.mkdir(parents=True, exist_ok=True)
    config.config_path.write_text("[chat]\ntemperature = 0.3\n", encoding="utf-8")
    store = open_store(config)
    for title in ("first chat", "second chat"):
        s = store.create_session(system_prompt="sys")
        store.add_turn(s.id, _turn(f"{title}: hello"))
        store.add_turn(s.id, _turn(f"{title}: more"))
    vdir = config.adapters_dir / "v1"
    vdir.mkdir(parents=True)
    _lora(vdir / "adapter.gguf")
    meta = {"version": 1, "base": {"name": "smollm2-135m", "sha256": "test-sha", "arch": "llama"}}
    (vdir / "metadata.json").write_text(json.dumps(meta) + "\n", encoding="utf-8")
    with store.transaction():
        store.db.execute(
            "INSERT INTO adapters(version, status, base_name, base_sha256, path, n_samples, metrics, validation,"
            " created_at) VALUES (1, 'ready', 'smollm2-135m', 'test-sha', ?, 2, '{}', '{}', ?)",
            [str(vdir), now_iso()],
        )
    store.set_setting("active_adapter", 1)
    (config.adapters_dir / ".staging-v2").mkdir()
    (config.adapters_dir / ".staging-v2" / "adapter.gguf").write_bytes(b"half written")
    (config.adapters_dir / ".train.lock").write_text("")
    return store


def _names(archive: Path) -> list[str]:
    with tarfile.open(archive, "r:gz") as tar:
        return tar.getnames()


def _chats(store: Store) -> list[tuple[str, list[str]]]:
    return [(s.title, [t.user_content for t in store.list_turns(s.id)]) for s in store.list_sessions()]


def test_round_trip_into_a_new_data_dir_serves_the_same_adapter(tmp_path, engine, capsys):
    old = Config(home=tmp_path / "old")
    store = _data_dir(old)
    prompt = engine.build_prompt("", [], "Name three fruits.", thinking=False, reply_room=64).token_ids
    base_reply = engine.generate(prompt, GREEDY).reply_ids
    try:
        assert AdapterSwitch(engine, store).sync() is None and engine.adapter_version == 1
        tuned_reply = engine.generate(prompt, GREEDY).reply_ids
        assert tuned_reply != base_reply  # the adapter changes the output, so serving it is visible
        chats = _chats(store)
    finally:
        engine.clear_adapter()
        store.close()

    archive = tmp_path / "backup.tar.gz"
    assert main(["--data-dir", str(old.home), "backup", "--out", str(archive)]) == 0
    assert "adapter versions: v1" in capsys.readouterr().out
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    names = _names(archive)
    assert names[0] == "manifest.json"
    assert set(names) == {
        "manifest.json",
        "clawdesk.db",
        "config.toml",
        "adapters/v1/adapter.gguf",
        "adapters/v1/metadata.json",
    }  # fmt: skip -- no .staging-v2, no .train.lock
    with tarfile.open(archive, "r:gz") as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
    assert manifest["format"] == 1 and manifest["clawdesk_version"] and manifest["created_at"]
    gguf = (old.adapters_dir / "v1" / "adapter.gguf").read_bytes()
    assert manifest["files"]["adapters/v1/adapter.gguf"]["sha256"] == hashlib.sha256(gguf).hexdigest()

    # The old data dir is gone: nothing of the restored one may still point into it.
    old.home.rename(tmp_path / "gone")
    new = Config(home=tmp_path / "new")
    assert main(["--data-dir", str(new.home), "restore", str(archive)]) == 0
    out = capsys.readouterr().out
    assert "2 session(s), 4 turn(s), adapter versions: v1" in out
    assert new.config_path.read_text(encoding="utf-8") == "[chat]\ntemperature = 0.3\n"
    assert stat.S_IMODE(new.db_path.stat().st_mode) == 0o600
    assert not list(tmp_path.glob(".new.restore-*"))  # the staging dir is cleaned up
    restored = open_store(new)
    try:
        assert _chats(restored) == chats
        assert active_version(restored) == 1
        assert AdapterSwitch(engine, restored).sync() is None
        assert engine.adapter_version == 1
        assert engine.generate(prompt, GREEDY).reply_ids == tuned_reply
        row = restored.db.execute("SELECT path FROM adapters WHERE version = 1").fetchone()
        assert row == (str(new.adapters_dir / "v1"),)
    finally:
        engine.clear_adapter()
        restored.close()


def test_backup_is_consistent_while_another_connection_writes(config, store):
    s = store.create_session(system_prompt="sys")
    for i in range(400):  # ~1 MB, so each copy takes a moment
        store.add_turn(s.id, _turn(f"turn {i} " + "x" * 2000))
    s2 = store.create_session(system_prompt="sys").id
    # A reply being recorded right now: its write transaction stays open during the whole copy.
    writer = sqlite3.connect(config.db_path, timeout=10)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE sessions SET title = 'uncommitted' WHERE id = ?", [s.id])
    copies = [config.home / "copy0.db"]
    try:
        copy_database(config.db_path, copies[0])  # does not wait for the writer: WAL readers never do
    finally:
        writer.rollback()
        writer.close()
    # And another connection committing turns as fast as it can while copies are made.
    stop, written = threading.Event(), [0]

    def write_loop():
        w = Store.open(config.db_path)
        try:
            while not stop.is_set():
                w.add_turn(s2, _turn("concurrent"))
                written[0] += 1
        finally:
            w.close()

    thread = threading.Thread(target=write_loop)
    thread.start()
    try:
        for i in range(1, 6):
            copies.append(config.home / f"copy{i}.db")
            copy_database(config.db_path, copies[-1])
    finally:
        stop.set()
        thread.join()
    assert written[0] > 0
    for path in copies:
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)  # a self-contained file
            assert conn.execute("SELECT title FROM sessions WHERE id = ?", [s.id]).fetchone() != ("uncommitted",)
            # Every turn in the copy is whole: a turn and its token row are committed together.
            assert conn.execute(
                "SELECT count(*) FROM turns t LEFT JOIN turn_tokens k ON k.turn_id = t.id WHERE k.turn_id IS NULL"
            ).fetchone() == (0,)
            assert conn.execute("SELECT count(*) FROM turns WHERE session_id = ?", [s.id]).fetchone() == (400,)
        finally:
            conn.close()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


# -- restore refuses ------------------------------------------------------------------------


@pytest.fixture
def archive(tmp_path, config, store) -> Path:
    s = store.create_session(system_prompt="sys")
    store.add_turn(s.id, _turn("hello"))
    out = tmp_path / "b.tar.gz"
    create_backup(config, out)
    return out


def _rewrite(archive: Path, out: Path, *, extra: list[tuple[tarfile.TarInfo, bytes | None]] = (), edit=None) -> Path:
    """A copy of ``archive`` with members edited or added (the manifest is kept as it was unless edited)."""
    with tarfile.open(archive, "r:gz") as src, tarfile.open(out, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read()
            if edit is not None:
                data = edit(m.name, data)
            m.size = len(data)
            dst.addfile(m, io.BytesIO(data))
        for info, data in extra:
            dst.addfile(info, io.BytesIO(data) if data is not None else None)
    return out


def _info(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, size, linkname
    return info


@pytest.mark.parametrize(
    "extra, needle",
    [
        ([(_info("/etc/evil", size=1), b"x")], "absolute path"),
        ([(_info("../evil", size=1), b"x")], "unsafe path"),
        ([(_info("adapters/v1/../../evil", size=1), b"x")], "unsafe path"),
        ([(_info("adapters/v1/link", tarfile.SYMTYPE, linkname="/etc/passwd"), None)], "is a link"),
        ([(_info("adapters/v1/hard", tarfile.LNKTYPE, linkname="clawdesk.db"), None)], "is a link"),
        ([(_info("adapters/v1/dev", tarfile.CHRTYPE), None)], "device or special file"),
        ([(_info("adapters/v1/fifo", tarfile.FIFOTYPE), None)], "device or special file"),
        ([(_info("models/huge.gguf", size=1), b"x")], "unexpected member"),
        ([(_info("adapters/v1/extra.bin", size=1), b"x")], "manifest and the archive disagree"),
        ([(_info("clawdesk.db", size=1), b"x")], "appears twice"),
    ],
)
def test_restore_refuses_hostile_members(tmp_path, archive, extra, needle):
    bad = _rewrite(archive, tmp_path / "bad.tar.gz", extra=extra)
    home = tmp_path / "victim" / "home"
    with pytest.raises(InputError, match=needle) as err:
        restore_backup(bad, home)
    assert "Nothing was restored" in str(err.value)
    assert not home.exists() and not (tmp_path / "evil").exists() and not Path("/etc/evil").exists()
    assert list((tmp_path / "victim").iterdir()) == []  # the staging dir is gone too


def test_restore_refuses_bad_files(tmp_path, archive):
    home = tmp_path / "new"
    with pytest.raises(NotFoundError, match="no backup file at"):
        restore_backup(tmp_path / "missing.tar.gz", home)
    text = tmp_path / "notes.txt"
    text.write_text("not an archive")
    with pytest.raises(InputError, match="not a gzip-compressed tar archive"):
        restore_backup(text, home)
    data = archive.read_bytes()
    (tmp_path / "cut.tar.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="damaged"):
        restore_backup(tmp_path / "cut.tar.gz", home)
    flipped = _rewrite(
        archive, tmp_path / "flip.tar.gz", edit=lambda n, d: d[:-1] + bytes([d[-1] ^ 1]) if n == "clawdesk.db" else d
    )
    with pytest.raises(InputError, match=r"clawdesk\.db does not match its sha256"):
        restore_backup(flipped, home)
    newer = _rewrite(
        archive, tmp_path / "newer.tar.gz",
        edit=lambda n, d: json.dumps({**json.loads(d), "format": 99}).encode() if n == "manifest.json" else d,
    )  # fmt: skip
    with pytest.raises(InputError, match="newer ClawDesk"):
        restore_backup(newer, home)
    assert not home.exists()


def test_restore_checks_the_database_itself(tmp_path, archive):
    """A database that matches its (rewritten) manifest but fails integrity_check is still refused."""
    with tarfile.open(archive, "r:gz") as tar:
        db = tar.extractfile("clawdesk.db").read()
        manifest = json.loads(tar.extractfile("manifest.json").read())
    broken = bytearray(db)
    broken[4096:8192] = b"\xff" * 4096  # scribble over the whole second page (a b-tree page)
    manifest["files"]["clawdesk.db"] = {"sha256": hashlib.sha256(broken).hexdigest(), "size": len(broken)}
    out = tmp_path / "corrupt.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        for name, data in (("manifest.json", json.dumps(manifest).encode()), ("clawdesk.db", bytes(broken))):
            tar.addfile(_info(name, size=len(data)), io.BytesIO(data))
    with pytest.raises(InputError, match=r"damaged or not a ClawDesk backup: its clawdesk\.db"):
        restore_backup(out, tmp_path / "new")
    assert not (tmp_path / "new").exists()


def _with_database(archive: Path, out: Path, db: bytes) -> Path:
    """A copy of ``archive`` whose clawdesk.db is ``db``, with the manifest rewritten to match it."""
    with tarfile.open(archive, "r:gz") as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
    manifest["files"]["clawdesk.db"] = {"sha256": hashlib.sha256(db).hexdigest(), "size": len(db)}
    with tarfile.open(out, "w:gz") as tar:
        for name, data in (("manifest.json", json.dumps(manifest).encode()), ("clawdesk.db", db)):
            tar.addfile(_info(name, size=len(data)), io.BytesIO(data))
    return out


def test_restore_refuses_a_sound_sqlite_file_that_is_not_a_clawdesk_database(tmp_path, archive):
    other = tmp_path / "photos.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO photos(name) VALUES ('beach.jpg')")
    conn.commit()
    conn.close()
    foreign = _with_database(archive, tmp_path / "foreign.tar.gz", other.read_bytes())
    with pytest.raises(InputError, match=r"its clawdesk\.db is not a ClawDesk database") as err:
        restore_backup(foreign, tmp_path / "new")
    assert "Nothing was restored" in str(err.value)
    assert not (tmp_path / "new").exists()


def test_a_forced_restore_whose_rename_fails_half_way_puts_the_old_files_back(tmp_path, archive, monkeypatch):
    target = tmp_path / "target"
    with Store.open(target / "clawdesk.db") as other:
        other.create_session(system_prompt="sys", title="the one that was here")
    (target / "adapters" / "v7").mkdir(parents=True)
    (target / "config.toml").write_text("[chat]\ntemperature = 0.1\n")
    before = sorted(p.relative_to(target).as_posix() for p in target.rglob("*"))
    real_rename = os.rename
    moved = []

    def rename(src, dst):
        # The old files are already aside when the first restored file is to go in: fail there.
        if Path(src).parent.name.startswith(".target.restore-"):
            raise OSError(28, "No space left on device")
        moved.append(Path(src).name)
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(StoreError, match="left as it was"):
        restore_backup(archive, target, force=True)
    monkeypatch.undo()
    assert "clawdesk.db" in moved and "adapters" in moved  # it did get half-way
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*")) == before
    with Store.open(target / "clawdesk.db") as back:
        assert [s.title for s in back.list_sessions()] == ["the one that was here"]
    assert list(tmp_path.glob("target.before-restore-*")) == []  # nothing left aside: it is all back
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".target")] == []  # staging removed


def test_restore_over_existing_data_needs_force_and_keeps_the_old_files(tmp_path, archive, home, capsys):
    # The target holds another database, an adapter and a model that the backup does not contain.
    target = tmp_path / "target"
    other = Store.open(target / "clawdesk.db")
    other.create_session(system_prompt="sys", title="the one that was here")
    other.close()
    (target / "adapters" / "v7").mkdir(parents=True)
    (target / "models").mkdir()
    (target / "models" / "model.gguf").write_bytes(b"weights")

    code = main(["--data-dir", str(target), "restore", str(archive)])
    err = capsys.readouterr().err
    assert code == 2 and "already holds a ClawDesk database" in err and "--force" in err
    assert (target / "adapters" / "v7").is_dir()

    assert main(["--data-dir", str(target), "restore", str(archive), "--force"]) == 0
    out = capsys.readouterr().out
    [aside] = tmp_path.glob("target.before-restore-*")
    assert f"kept in {aside}" in out
    restored = Store.open(target / "clawdesk.db")
    try:
        assert [s.title for s in restored.list_sessions()] == ["hello"]
    finally:
        restored.close()
    kept = Store.open(aside / "clawdesk.db")
    try:
        assert [s.title for s in kept.list_sessions()] == ["the one that was here"]
    finally:
        kept.close()
    assert (aside / "adapters" / "v7").is_dir() and not (target / "adapters").exists()
    assert (target / "models" / "model.gguf").read_bytes() == b"weights"  # models stay where they were


def test_cli_backup_bad_inputs(tmp_path, home, capsys):
    code = main(["backup", "--out", str(tmp_path / "b.tar.gz")])
    assert code == 1 and "nothing to back up: no database at" in capsys.readouterr().err
    store = open_store(Config(home=home))
    store.close()
    (tmp_path / "exists.tar.gz").write_text("")
    assert main(["backup", "--out", str(tmp_path / "exists.tar.gz")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["backup", "--out", str(tmp_path / "no" / "dir" / "b.tar.gz")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["restore", str(tmp_path / "missing.tar.gz")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("clawdesk: error: no backup file at") and "Traceback" not in err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no partial files left behind
    assert set(os.listdir(tmp_path)) == {"home", "exists.tar.gz"}
