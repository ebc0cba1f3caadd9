"""Data commands: ``forget`` (delete recorded turns for good), ``backup`` and ``restore``.

Registered on the parser by :func:`add_commands`; the work happens in :mod:`clawdesk.store.forget`
and :mod:`clawdesk.backup`, which raise :class:`~clawdesk.errors.ClawDeskError` for anything a
person can fix.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clawdesk.cli.args import count
from clawdesk.cli.common import AddCommand, opened_store
from clawdesk.config import Config
from clawdesk.errors import InputError


def add_commands(add: AddCommand) -> None:
    p = add("forget", cmd_forget, "delete chats or turns for good (and compact the file so no text is left)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--session", type=count, metavar="ID", help="delete chat session ID and all its turns")
    which.add_argument("--turn", type=count, metavar="ID", help="delete one turn (a message and its reply)")
    which.add_argument("--all", action="store_true", help="delete every session, turn, memory note and preference")
    which.add_argument("--compact", action="store_true", help="only compact the file (after a blocked forget)")
    p.add_argument("--yes", action="store_true", help="do not ask before --all")
    p = add("backup", cmd_backup, "write the log, adapters and config.toml to one .tar.gz (models are left out)")
    p.add_argument("--out", required=True, type=Path, metavar="FILE", help="the archive to create (.tar.gz)")
    p = add("restore", cmd_restore, "restore a backup into the data dir (checked before anything is replaced)")
    p.add_argument("file", type=Path, metavar="FILE", help="a .tar.gz written by `clawdesk backup`")
    p.add_argument("--force", action="store_true", help="replace an existing database (the old files are kept)")


def _confirm_all(n_sessions: int, n_turns: int) -> bool:
    if not sys.stdin.isatty():
        raise InputError("--all deletes every chat; add --yes to confirm when not running in a terminal")
    answer = input(
        f"Delete all {n_sessions} session(s) and {n_turns} turn(s), every memory note and preference, for good? [y/N] "
    )
    return answer.strip().lower() in ("y", "yes")


def cmd_forget(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.store.forget import compact, compaction_pending_message, forget_all, forget_session, forget_turn

    if not config.db_path.exists():
        print(f"Nothing to forget: there is no database at {config.db_path} yet.")
        return 0
    with opened_store(config) as store:
        if args.compact:
            if compact(store):
                print(f"compacted {config.db_path}: deleted text is gone from the file")
                return 0
            print(compaction_pending_message(), file=sys.stderr)
            return 1
        if args.all:
            n_sessions = len(store.list_sessions())
            n_turns = store.count_turns()
            if not args.yes and not _confirm_all(n_sessions, n_turns):
                print("Nothing was deleted.")
                return 1
            result = forget_all(store)
            print(f"deleted {result.sessions} session(s) and {result.turns} turn(s), and {result.notes} memory note(s)")
        elif args.session is not None:
            result = forget_session(store, args.session)
            print(f"deleted session {args.session} and its {result.turns} turn(s)")
        else:
            result = forget_turn(store, args.turn)
            print(f"deleted turn {args.turn}")
            if result.scrubbed:
                print(
                    f"{result.scrubbed} later turn(s) of that chat were served with it in their prompt: their token "
                    "records and judgments are deleted too, and they will never be trained on"
                )
        if result.compacted:
            print(f"compacted {config.db_path}: the deleted text is in neither the database nor its WAL")
        advice = result.advice()
        if advice:
            print(advice)
    return 0


def cmd_backup(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.backup import create_backup

    result = create_backup(config, args.out)
    versions = ", ".join(f"v{v}" for v in result.versions) or "none"
    print(f"wrote {result.path} ({result.files} file(s), {result.bytes / 1e6:.1f} MB; adapter versions: {versions})")
    print("Models are not included: `clawdesk pull` fetches them again. The file holds your chats: keep it private.")
    return 0


def cmd_restore(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.backup import restore_backup

    result = restore_backup(args.file, config.home, force=args.force)
    versions = ", ".join(f"v{v}" for v in result.versions) or "none"
    print(
        f"restored the backup of {result.created_at} into {result.home}: {result.sessions} session(s), "
        f"{result.turns} turn(s), adapter versions: {versions}"
    )
    if result.moved_aside is not None:
        print(f"the files it replaced are kept in {result.moved_aside}")
    return 0
