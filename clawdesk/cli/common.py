"""What every command group shares: the global flags, opening the store, the ``--workspace`` check.

``cli.main`` builds the config once and hands it to each command; a command that needs the
database opens it with :func:`opened_store`, the one place the CLI opens and closes a store.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from clawdesk.config import Config
from clawdesk.errors import InputError

if TYPE_CHECKING:
    from clawdesk.store import Store

Command = Callable[[argparse.Namespace, Config], int]
# add(name, command, help) -> the command's subparser, with the global flags already on it.
AddCommand = Callable[[str, Command, str], argparse.ArgumentParser]


def add_global(p: argparse.ArgumentParser, *, suppress: bool) -> None:
    """``--data-dir`` and ``--model``; ``suppress`` on subparsers, so the flags work before or after the command."""
    default = argparse.SUPPRESS if suppress else None
    p.add_argument(
        "--data-dir", metavar="DIR", default=default, help="where ClawDesk keeps its data (or CLAWDESK_HOME)"
    )
    p.add_argument("--model", metavar="PATH|NAME", default=default, help="a .gguf file or a known model name")


@contextmanager
def opened_store(config: Config) -> Iterator[Store]:
    """The data dir's store (made on first use), closed when the block ends, however it ends."""
    from clawdesk.runtime import open_store

    store = open_store(config)
    try:
        yield store
    finally:
        store.close()


def workspace_path(option: str | None, config: Config) -> Path | None:
    """``--workspace DIR`` as an absolute path (None without the flag); a missing directory is an InputError."""
    if option is None:
        return None
    path = Path(option).expanduser().absolute()
    if not path.is_dir():
        raise InputError(
            f"--workspace {option}: no such directory. Create it first, or leave --workspace out to use "
            f"{config.workspace_dir}."
        )
    return path
