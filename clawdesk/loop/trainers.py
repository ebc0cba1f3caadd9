"""The learning loop's trainer strategies: how one training run is started and followed.

:class:`~clawdesk.loop.LearningLoop` asks its :class:`Trainer` to :meth:`~Trainer.start` a run on a
batch and follows the run's :mod:`clawdesk.learn.protocol` messages (:meth:`TrainerRun.follow`) in
one watcher, whichever strategy made the run:

- :class:`ProcessTrainer` (the app's): one separate, low-priority ``python -m clawdesk.learn.trainer``
  process per optimizer step (:mod:`clawdesk.loop.trainer_process`); the chat stops it while it
  generates. Each launch reloads the base, restarts the optimizer from the saved adapter, is
  unseeded and takes half the cores: the chat comes first.
- :class:`InProcessTrainer` (the eval's): :func:`clawdesk.learn.trainer.train` on the watcher's thread
  with one seeded :class:`~clawdesk.learn.learner.Learner` kept across runs (its LoRA init and AdamW
  moments carry over, the base is loaded once) and torch on every core: reproducible numbers when
  nothing runs beside it. Its progress reaches the loop as the same typed protocol objects.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from clawdesk.config import Config
from clawdesk.engine import Engine
from clawdesk.errors import ClawDeskError
from clawdesk.learn.protocol import TrainerFailed, TrainerMessage, TrainProgress
from clawdesk.loop.trainer_process import TrainerProcess

if TYPE_CHECKING:
    from clawdesk.learn.learner import Learner

OnMessage = Callable[[TrainerMessage], None]


class TrainerRun(Protocol):
    """One training run that the loop follows to its end."""

    @property
    def process(self) -> subprocess.Popen | None:
        """The run's own process, which the chat may pause; None for a run in this process."""
        ...

    def follow(self, on_message: OnMessage) -> int:
        """Pass each protocol message to ``on_message`` as it comes; the exit code (0: finished cleanly)."""
        ...


class Trainer(Protocol):
    """A training strategy: starts one run on ``batch`` samples of ``engine``'s model (it must not block)."""

    def start(self, config: Config, engine: Engine, batch: int) -> TrainerRun: ...


class ProcessTrainer:
    """The app's trainer: one optimizer step per ``python -m clawdesk.learn.trainer`` process."""

    def start(self, config: Config, engine: Engine, batch: int) -> TrainerProcess:
        return TrainerProcess(config, engine, batch)


@dataclass
class InProcessTrainer:
    """Trains in this process with one :class:`Learner` kept across runs (loaded at the first run).

    ``seed`` seeds torch before the fresh LoRA is made; ``threads`` is torch's thread count (None:
    every core); ``steps`` the versions one run makes (None: as many as full batches are ready).
    After a run :attr:`learner` holds the newest ready version's weights (a rejected step is undone).
    """

    seed: int = 0
    threads: int | None = None
    steps: int | None = None
    learner: Learner | None = field(default=None, init=False)

    def start(self, config: Config, engine: Engine, batch: int) -> TrainerRun:
        return _InProcessRun(self, config, engine, batch)

    def train(self, config: Config, engine: Engine, batch: int, on_message: OnMessage) -> list[int]:
        """One run on the calling thread; the versions it made (rejected ones included)."""
        import torch

        from clawdesk.learn.trainer import load_learner, train

        torch.set_num_threads(self.threads or os.cpu_count() or 2)
        train_config = config.train
        if batch != train_config.batch_size:
            train_config = dataclasses.replace(train_config, batch_size=batch)
        ident = engine.identity
        if self.learner is None:
            parent = self._newest_ready(config, ident.sha256)
            torch.manual_seed(self.seed)  # the fresh LoRA's initial A matrices
            on_message(TrainProgress("loading", 0, 1, "loading the base model for training (once per run)"))
            self.learner = load_learner(ident.path, train_config, parent)
        return train(
            config.db_path, config.adapters_dir, ident.path, ident.name, ident.sha256, train_config,
            steps=self.steps, on_progress=on_message, learner=self.learner, system_prompt=config.chat.system_prompt,
        )  # fmt: skip

    @staticmethod
    def _newest_ready(config: Config, base_sha256: str):
        """The version a learner loaded now must continue (None in a data dir without one, as the eval's)."""
        from clawdesk.store import Store
        from clawdesk.store.versions import latest_ready

        store = Store.open(config.db_path)
        try:
            return latest_ready(store, base_sha256)
        finally:
            store.close()


@dataclass
class _InProcessRun:
    """A run of :class:`InProcessTrainer`: it trains when followed, on the follower's thread."""

    trainer: InProcessTrainer
    config: Config
    engine: Engine
    batch: int

    @property
    def process(self) -> None:
        return None

    def follow(self, on_message: OnMessage) -> int:
        try:
            self.trainer.train(self.config, self.engine, self.batch, on_message)
        except ClawDeskError as err:  # what the trainer process would print as its last line, and exit 1
            on_message(TrainerFailed(str(err), type(err).__name__))
            return 1
        return 0
