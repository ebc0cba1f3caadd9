"""Checking a model file before llama.cpp opens it: a regular file with a GGUF preamble of a known version.

Cheap on purpose (a stat and 24 bytes), because it runs on every model resolve and engine load; the
full header is :func:`clawdesk.gguf.header.read_header`'s. Failures are :class:`ModelError`\\ s that
name the file and say what to do.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from clawdesk.errors import ModelError
from clawdesk.gguf.header import PREAMBLE_BYTES, VERSIONS, preamble_version


def check_gguf(path: Path) -> None:
    """Cheap structural check before llama.cpp sees the file: a regular file, magic, version, non-trivial size."""
    try:
        # stat first: opening a FIFO for reading would block until a writer appears, i.e. forever.
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {exc.strerror or exc}. Give a path to a .gguf file.") from exc
    if stat.S_ISDIR(mode):
        raise ModelError(f"{path} is a directory; --model needs a .gguf file inside it.")
    if not stat.S_ISREG(mode):
        kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "not a regular file (a device or socket)"
        raise ModelError(f"{path} is {kind}; --model needs a .gguf model file.")
    try:
        with path.open("rb") as fh:
            head = fh.read(PREAMBLE_BYTES)
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {exc.strerror or exc}. Check its permissions.") from exc
    version = preamble_version(head)
    if version is None:
        raise ModelError(
            f"{path} is not a GGUF model file (it does not start with the GGUF header). "
            "ClawDesk serves llama.cpp GGUF files; convert or download a .gguf."
        )
    if version not in VERSIONS:
        raise ModelError(f"{path} uses GGUF version {version}; only versions 2 and 3 are supported.")
