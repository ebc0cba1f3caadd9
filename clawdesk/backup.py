"""Backing up and restoring a data dir: ``clawdesk backup`` / ``clawdesk restore``.

A backup is one ``.tar.gz`` (created 0600) holding ``manifest.json`` (format version, created_at,
ClawDesk version, sha256 and size per file), ``clawdesk.db`` (a copy made with SQLite's online
backup API, so it is consistent while the chat or a training run writes; the SQL is
:mod:`clawdesk.store.integrity`'s), ``config.toml`` and the
published adapter versions ``adapters/v<N>/…`` (never ``.staging-*`` dirs or the training lock).
Pulled models are left out: they are large and ``clawdesk pull`` fetches them again.

A restore never extracts blindly: every member must be a plain file with one of the names above,
match its manifest hash, and the database must pass ``PRAGMA integrity_check`` — all checked in a
temporary dir next to the data dir. Only then are files moved into place with renames; an existing
database is replaced only with ``force``, and the old files are kept in ``<home>.before-restore-<ts>``.
``adapters.path`` rows hold absolute paths (``<adapters dir>/v<N>``), so they are rewritten to the
restored data dir.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from clawdesk import __version__
from clawdesk.config import Config
from clawdesk.errors import DataDirError, InputError, NotFoundError, StoreError
from clawdesk.store.integrity import copy_database, count_chats, database_problem, rebase_adapter_paths

__all__ = ["BackupResult", "RestoreResult", "copy_database", "create_backup", "restore_backup"]

FORMAT = 1
MANIFEST = "manifest.json"
DB_NAME = "clawdesk.db"
CONFIG_NAME = "config.toml"
ADAPTERS = "adapters"
_VERSION_DIR = re.compile(r"^v\d+$")
_MAX_MANIFEST = 16 << 20  # a manifest is a few KB; refuse to parse anything huge
_CHUNK = 1 << 20


@dataclass(frozen=True)
class BackupResult:
    path: Path
    files: int
    bytes: int
    versions: tuple[int, ...]


@dataclass(frozen=True)
class RestoreResult:
    home: Path
    moved_aside: Path | None  # where the replaced files went (``force``), None when nothing was replaced
    sessions: int
    turns: int
    versions: tuple[int, ...]
    created_at: str


# -- backup --------------------------------------------------------------------------------


def create_backup(config: Config, out: Path) -> BackupResult:
    """Write a backup of ``config.home`` to ``out`` (which must not exist yet)."""
    out = out.expanduser()
    if not config.db_path.is_file():
        raise NotFoundError(f"there is nothing to back up: no database at {config.db_path} (check --data-dir)")
    if out.exists():
        raise InputError(f"{out} already exists; choose another file name (a backup never overwrites a file)")
    if not out.parent.is_dir():
        raise InputError(f"cannot write {out}: the folder {out.parent} does not exist")
    with tempfile.TemporaryDirectory(prefix=".clawdesk-backup-", dir=out.parent) as tmp:
        db_copy = Path(tmp) / DB_NAME
        copy_database(config.db_path, db_copy)
        files: dict[str, Path] = {DB_NAME: db_copy}
        if config.config_path.is_file():
            files[CONFIG_NAME] = config.config_path
        versions = []
        for vdir in _published_versions(config.adapters_dir):
            versions.append(int(vdir.name[1:]))
            for f in sorted(vdir.rglob("*")):
                if f.is_file() and not f.is_symlink():
                    files[f"{ADAPTERS}/{f.relative_to(config.adapters_dir).as_posix()}"] = f
        manifest = {
            "format": FORMAT,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "clawdesk_version": __version__,
            "source_home": str(config.home),
            "files": {name: {"sha256": _sha256(path), "size": path.stat().st_size} for name, path in files.items()},
        }
        _write_archive(out, manifest, files)
    return BackupResult(out, len(files), out.stat().st_size, tuple(sorted(versions)))


def _published_versions(adapters_dir: Path) -> list[Path]:
    if not adapters_dir.is_dir():
        return []
    dirs = [p for p in adapters_dir.iterdir() if _VERSION_DIR.match(p.name) and p.is_dir() and not p.is_symlink()]
    return sorted(dirs, key=lambda p: int(p.name[1:]))


def _write_archive(out: Path, manifest: dict[str, Any], files: dict[str, Path]) -> None:
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    try:
        fd = os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)  # born private: it holds every chat
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            data = json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8")
            tar.addfile(_member(MANIFEST, len(data)), io.BytesIO(data))
            for name, path in files.items():
                with path.open("rb") as fh:
                    tar.addfile(_member(name, manifest["files"][name]["size"]), fh)
            raw.flush()
            os.fsync(raw.fileno())
        os.rename(partial, out)
    except OSError as exc:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        raise StoreError(f"could not write the backup {out} ({exc}); check free disk space and permissions") from exc


def _member(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode = size, 0o600
    info.mtime = int(datetime.now(UTC).timestamp())
    return info


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


# -- restore -------------------------------------------------------------------------------


def restore_backup(archive: Path, home: Path, *, force: bool = False) -> RestoreResult:
    """Verify ``archive`` and put its files into ``home`` (see the module docstring)."""
    archive = archive.expanduser()
    if not archive.exists():
        raise NotFoundError(f"no backup file at {archive}")
    if not archive.is_file():
        raise InputError(f"{archive} is not a file; give the .tar.gz that `clawdesk backup --out FILE` wrote")
    if (home / DB_NAME).exists() and not force:
        raise InputError(
            f"{home} already holds a ClawDesk database; nothing was changed. Restore into a new data dir with "
            "--data-dir DIR, or add --force to replace it (the current files are kept next to it)."
        )
    try:
        home.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{home.name}.restore-", dir=home.parent))
    except OSError as exc:
        raise DataDirError(
            f"cannot restore into {home}: {home.parent} is not writable ({exc.strerror or exc}). "
            "Choose another data dir with --data-dir DIR."
        ) from exc
    try:
        manifest = _extract_verified(archive, staging)
        versions = _fix_adapter_paths(staging / DB_NAME, home / ADAPTERS, archive)
        sessions, turns = count_chats(staging / DB_NAME)
        moved_aside = _put_in_place(staging, home)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return RestoreResult(home, moved_aside, sessions, turns, versions, str(manifest.get("created_at", "?")))


def _damaged(archive: Path, why: str) -> InputError:
    return InputError(f"the backup {archive} is damaged or not a ClawDesk backup: {why}. Nothing was restored.")


def _extract_verified(archive: Path, dest: Path) -> dict[str, Any]:
    try:
        tar = tarfile.open(archive, mode="r:gz")  # noqa: SIM115 -- closed by the `with tar:` below
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise InputError(
            f"{archive} is not a ClawDesk backup (not a gzip-compressed tar archive: {exc}). "
            "Give the .tar.gz that `clawdesk backup --out FILE` wrote."
        ) from exc
    with tar:
        try:
            members = tar.getmembers()
            names = [_check_member(archive, m) for m in members]
            if len(set(names)) != len(names):
                raise _damaged(archive, "a file name appears twice")
            if MANIFEST not in names:
                raise _damaged(archive, f"it has no {MANIFEST}")
            manifest = _read_manifest(archive, tar, members[names.index(MANIFEST)])
            listed = set(manifest["files"])
            present = {n for n, m in zip(names, members, strict=True) if m.isfile()} - {MANIFEST}
            if listed != present:
                odd = sorted(listed ^ present)
                raise _damaged(archive, f"the manifest and the archive disagree about {', '.join(odd[:5])}")
            if DB_NAME not in listed:
                raise _damaged(archive, f"it holds no {DB_NAME}")
            for name, member in zip(names, members, strict=True):
                if member.isfile() and name != MANIFEST:
                    _extract_one(archive, tar, member, dest / name, manifest["files"][name])
        except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise _damaged(archive, f"it cannot be read to the end ({exc})") from exc
        except OSError as exc:  # writing the extracted files
            raise StoreError(
                f"could not unpack {archive} next to the data dir ({exc}); check free disk space. Nothing was restored."
            ) from exc
    _check_database(archive, dest / DB_NAME)
    return manifest


def _check_member(archive: Path, member: tarfile.TarInfo) -> str:
    """The member's name, if it is a plain file (or dir) at an expected, harmless path; else refuse."""
    name = member.name
    path = PurePosixPath(name)
    if name.startswith(("/", "\\")) or path.is_absolute() or re.match(r"^[A-Za-z]:", name):
        raise _damaged(archive, f"member {name!r} has an absolute path")
    if any(part in ("..", "") for part in name.rstrip("/").split("/")) or "\\" in name or "\0" in name:
        raise _damaged(archive, f"member {name!r} has an unsafe path")
    if not (member.isfile() or member.isdir()):
        kind = "link" if member.issym() or member.islnk() else "device or special file"
        raise _damaged(archive, f"member {name!r} is a {kind}, which a backup never contains")
    parts = path.parts
    expected = (
        name in (MANIFEST, DB_NAME, CONFIG_NAME)
        or (parts[0] == ADAPTERS and len(parts) >= 2 and _VERSION_DIR.match(parts[1]) and member.isdir())
        or (parts[0] == ADAPTERS and len(parts) >= 3 and _VERSION_DIR.match(parts[1]))
        or (name == ADAPTERS and member.isdir())
    )
    if not expected:
        raise _damaged(archive, f"unexpected member {name!r}")
    return path.as_posix()


def _read_manifest(archive: Path, tar: tarfile.TarFile, member: tarfile.TarInfo) -> dict[str, Any]:
    if not member.isfile() or member.size > _MAX_MANIFEST:
        raise _damaged(archive, f"{MANIFEST} is not a small file")
    try:
        manifest = json.loads(tar.extractfile(member).read())
    except (ValueError, UnicodeDecodeError) as exc:
        raise _damaged(archive, f"{MANIFEST} is not valid JSON ({exc})") from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("format"), int):
        raise _damaged(archive, f"{MANIFEST} has no format version")
    if manifest["format"] > FORMAT:
        raise InputError(
            f"{archive} was written by a newer ClawDesk (backup format {manifest['format']}, this one reads "
            f"{FORMAT}); upgrade ClawDesk to restore it"
        )
    files = manifest.get("files")
    ok = isinstance(files, dict) and all(
        isinstance(v, dict)
        and isinstance(v.get("sha256"), str)
        and isinstance(v.get("size"), int)
        and not isinstance(v.get("size"), bool)
        for v in files.values()
    )
    if not ok:
        raise _damaged(archive, f"{MANIFEST} does not list files with sha256 and size")
    return manifest


def _extract_one(archive: Path, tar: tarfile.TarFile, member: tarfile.TarInfo, out: Path, want: dict) -> None:
    if member.size != want["size"]:
        raise _damaged(archive, f"{member.name} is {member.size} bytes, the manifest says {want['size']}")
    out.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    src = tar.extractfile(member)
    h = hashlib.sha256()
    # O_EXCL + O_NOFOLLOW: we only ever create new plain files inside our own temporary dir.
    fd = os.open(out, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as dst:
        while block := src.read(_CHUNK):
            h.update(block)
            dst.write(block)
    if h.hexdigest() != want["sha256"]:
        raise _damaged(archive, f"{member.name} does not match its sha256 in the manifest")


def _check_database(archive: Path, db: Path) -> None:
    problem = database_problem(db)
    if problem is not None:
        raise _damaged(archive, f"its {DB_NAME} {problem}")


def _fix_adapter_paths(db: Path, adapters_dir: Path, archive: Path) -> tuple[int, ...]:
    """Point ``adapters.path`` at ``<restored adapters dir>/v<N>`` for the versions in the backup."""
    restored = {int(p.name[1:]) for p in _published_versions(db.parent / ADAPTERS)}
    try:
        rebase_adapter_paths(db, adapters_dir, restored)
    except StoreError as exc:
        raise _damaged(archive, f"its {DB_NAME} cannot be updated ({exc})") from exc
    return tuple(sorted(restored))


def _put_in_place(staging: Path, home: Path) -> Path | None:
    """Move the verified files from ``staging`` into ``home`` by renames; undo them all if one fails."""
    if not home.exists():
        os.rename(staging, home)  # one atomic step
        return None
    incoming = sorted(p.name for p in staging.iterdir())
    # Everything a backup holds is replaced, present in this one or not (an old adapter dir must not
    # mix with the restored log); the DB's WAL and shared-memory files move aside with the old DB.
    # Models and logs stay.
    owned = (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", ADAPTERS, CONFIG_NAME)
    replaced = [n for n in owned if (home / n).exists() or (home / n).is_symlink()]
    aside = None
    if replaced:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        aside = home.with_name(f"{home.name}.before-restore-{stamp}")
        n = 1
        while aside.exists():
            n += 1
            aside = home.with_name(f"{home.name}.before-restore-{stamp}-{n}")
        aside.mkdir(mode=0o700)
    done: list[tuple[Path, Path]] = []
    try:
        for name in replaced:
            os.rename(home / name, aside / name)
            done.append((home / name, aside / name))
        for name in incoming:
            os.rename(staging / name, home / name)
            done.append((staging / name, home / name))
    except OSError as exc:
        for src, dst in reversed(done):
            with contextlib.suppress(OSError):
                os.rename(dst, src)
        if aside is not None:
            with contextlib.suppress(OSError):
                aside.rmdir()  # only when empty: every old file went back
        if aside is not None and aside.exists():
            raise StoreError(
                f"could not move the restored files into {home} ({exc}), nor all the old ones back: what is "
                f"missing from {home} is in {aside}; move it back by hand"
            ) from exc
        raise StoreError(
            f"could not move the restored files into {home} ({exc}); the data dir was left as it was"
        ) from exc
    return aside
