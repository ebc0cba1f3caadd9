"""Command-line value checking: the argparse parser class and the ``type=`` validators for numbers.

Every numeric flag is checked here, while the arguments are parsed, so a bad number fails before
anything is opened or loaded, and the message names the flag. :class:`Parser` makes argparse's own
errors (unknown flag, bad choice, bad number) the same single ``clawdesk: error: …`` line that
``cli.main`` prints for every other error, with exit code 2.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import NoReturn

MAX_COUNT = 1_000_000_000  # far above any real count; keeps ids and limits inside SQLite's 64-bit integers
MAX_SEED = 2**32 - 1  # llama.cpp seeds are uint32 (and its -1 would mean "random", not reproducible)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one ``clawdesk: error:`` line (subparsers inherit it)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("clawdesk").strip()
        where = f"clawdesk {command} --help" if command else "clawdesk --help"
        self.exit(2, f"clawdesk: error: {message} (see `{where}`)\n")


def int_range(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type`` for whole numbers in ``low..high``; argparse names the flag in the error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {text}")
        return value

    return parse


def positive_float(text: str) -> float:
    """An argparse ``type`` for finite numbers > 0 (upper bounds are the config's to check)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


count = int_range(1, MAX_COUNT)  # --steps, --limit, --batch-size, --interactions, ids and version numbers
seed = int_range(0, MAX_SEED)
