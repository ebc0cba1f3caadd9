"""Building the live objects from config: the store, the served model's identity, the engine, the judge
and the learning loop.

``cli.main`` calls these and passes the results down; nothing else constructs them, so every
entry point (TUI, ``ask``, ``judge``, ``train``) serves, judges and records the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from clawdesk.config import Config
from clawdesk.engine import Engine
from clawdesk.models import DEFAULT_MODEL, ResolvedModel, file_sha256, resolve_model
from clawdesk.store import Store
from clawdesk.store.db import ensure_dir

if TYPE_CHECKING:
    from clawdesk.engine.gate import ChatGate
    from clawdesk.judge.runner import Judge
    from clawdesk.judge.service import BacklogJudge
    from clawdesk.loop import LearningLoop
    from clawdesk.loop.trainers import Trainer
    from clawdesk.preferences import HintClassifier


def open_store(config: Config) -> Store:
    ensure_dir(config.home)
    return Store.open(config.db_path)


def model_sha256(store: Store, path: Path) -> str:
    """sha256 of a model file, cached in the DB by (path, size, mtime) — a 2.5 GB hash takes ~10 s."""
    stat = path.stat()
    cached = store.cached_sha256(path, stat.st_size, stat.st_mtime_ns)
    if cached:
        return cached
    if stat.st_size > 256 << 20:
        print(f"Identifying {path.name} (sha256, once)…", file=sys.stderr, flush=True)
    digest = file_sha256(path)
    store.cache_sha256(path, stat.st_size, stat.st_mtime_ns, digest)
    return digest


def resolve_served_model(config: Config, cli_model: str | None) -> ResolvedModel:
    spec = cli_model or config.model.name
    explicit = cli_model is not None or config.model.name != DEFAULT_MODEL
    return resolve_model(spec, config.models_dir, explicit=explicit)


def load_engine(config: Config, store: Store, cli_model: str | None = None) -> Engine:
    model = resolve_served_model(config, cli_model)
    sha = model_sha256(store, model.path)
    mc = config.model
    return Engine.load(
        model, sha256=sha, n_ctx=mc.n_ctx, n_threads=mc.n_threads, n_gpu_layers=mc.n_gpu_layers, seed=mc.seed
    )


def load_judge(config: Config, store: Store, engine: Engine, **kwargs) -> Judge:
    """The judge on the served engine's base weights, or on ``judge.model`` when configured.

    The one place the app builds its judge. ``kwargs`` go to :class:`~clawdesk.judge.runner.Judge`
    (``gate``, ``stop``, ``method``). A judge on its own GGUF owns that engine: close
    ``judge.engine`` when it is not ``engine``."""
    from clawdesk.judge.runner import Judge

    judge_engine = engine
    if config.judge.model:
        model = resolve_model(config.judge.model, config.models_dir, explicit=True)
        judge_engine = Engine.load(
            model, sha256=model_sha256(store, model.path), n_ctx=config.model.n_ctx, n_threads=config.model.n_threads
        )
    return Judge(judge_engine, config.judge, policy=engine, **kwargs)


def build_learning_loop(
    config: Config,
    store: Store,
    engine: Engine,
    *,
    gate: ChatGate,
    auto_train: bool = True,
    judge: BacklogJudge | None = None,
    classify: HintClassifier | None = None,
    trainer: Trainer | None = None,
    synchronous: bool = False,
) -> LearningLoop:
    """The learning loop for ``engine``, its judge from :func:`load_judge` (so ``judge.model`` is
    honoured) yielding to the chat through ``gate`` (the chat service's). Call ``start()`` to run it
    and ``close()`` when done; it closes the judge's own engine, never ``engine``.

    The eval injects its own parts: ``judge`` (anything with the judge's ``judge``/``judge_step``/
    ``stop``/``engine``, e.g. its oracle) with ``classify``, how that judge's hints become preference
    items (None: none do), ``trainer`` (a :class:`~clawdesk.loop.trainers.Trainer`; default the trainer
    process) and ``synchronous`` (see :class:`~clawdesk.loop.LearningLoop`)."""
    from clawdesk.loop import LearningLoop

    if judge is None:
        judge = load_judge(config, store, engine, gate=gate)
        classify = hint_classifier(config, judge)
    return LearningLoop(
        config, store.path, engine, judge, gate=gate, auto_train=auto_train, classify=classify, trainer=trainer,
        synchronous=synchronous,
    )  # fmt: skip


def hint_classifier(config: Config, judge: Judge) -> HintClassifier | None:
    """The judge's standing-vs-one-off call that turns hints into preference items; None: the memory is off.

    It is :func:`clawdesk.judge.standing.classify_hint` bound to ``judge`` (its votes yield to the chat).
    """
    if not config.memory.enabled:
        return None
    import functools

    from clawdesk.judge.standing import classify_hint

    return functools.partial(classify_hint, judge)
