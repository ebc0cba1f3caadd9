"""Launching the trainer as a separate, low-priority process and reading its protocol lines.

The learning loop's default trainer (:class:`clawdesk.loop.trainers.ProcessTrainer`). One launch is
one optimizer step (``python -m clawdesk.learn.trainer --steps 1``) on exactly the batch the loop
counted. Its stdout carries :mod:`clawdesk.learn.protocol` lines; its stderr goes to
``logs/trainer.log`` (owner-only: errors and warnings can quote turns).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator

from clawdesk.config import Config
from clawdesk.engine import Engine
from clawdesk.learn.protocol import TrainerMessage, decode
from clawdesk.private import open_private, private_dir

LOG_NAME = "trainer.log"


def trainer_command(config: Config, engine: Engine, batch: int) -> list[str]:
    """The command line of one training step for the model ``engine`` serves."""
    ident = engine.identity
    return [
        sys.executable, "-m", "clawdesk.learn.trainer",
        "--db", str(config.db_path), "--adapters", str(config.adapters_dir),
        "--base", str(ident.path), "--base-name", ident.name, "--base-sha", ident.sha256,
        "--steps", "1", "--config-home", str(config.home),
        # Always explicit, so the process trains on exactly what the loop counted.
        "--batch-size", str(batch),
    ]  # fmt: skip


class TrainerProcess:
    """One running trainer process: :meth:`messages` yields its protocol lines until it exits."""

    def __init__(self, config: Config, engine: Engine, batch: int) -> None:
        log = open_private(private_dir(config.logs_dir) / LOG_NAME, "a")
        try:
            self.proc = subprocess.Popen(
                trainer_command(config, engine, batch), stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1
            )
        finally:
            log.close()  # the child holds its own descriptor

    def messages(self) -> Iterator[TrainerMessage]:
        """The process's protocol messages as they arrive (a stray non-protocol line is skipped: the log has stderr)."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = decode(line)
            if message is not None:
                yield message

    def wait(self) -> int:
        return self.proc.wait()

    @property
    def process(self) -> subprocess.Popen:
        """The child: the loop's :class:`~clawdesk.learn.pause.TrainerPause` stops it while the chat generates."""
        return self.proc

    def follow(self, on_message: Callable[[TrainerMessage], None]) -> int:
        """Pass every protocol message to ``on_message`` until the process exits; its exit code."""
        for message in self.messages():
            on_message(message)
        return self.wait()
