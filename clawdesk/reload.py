"""Reload stage: which adapter version the chat serves, and hot-swapping it into the engine.

The active version is a persisted setting (``active_adapter``, owned by :mod:`clawdesk.store.versions`),
so it survives restarts and a version chosen with ``clawdesk adapters use N`` is what the next chat
serves. Swapping goes through :meth:`Engine.load_adapter`, which takes the engine lock: a reply in progress finishes
on the old adapter, the next one uses the new adapter, and the base model is never reloaded.
"""

from __future__ import annotations

from clawdesk.engine import Engine
from clawdesk.errors import AdapterError, NotFoundError
from clawdesk.store import Store
from clawdesk.store.versions import ACTIVE_ADAPTER as ACTIVE_KEY
from clawdesk.store.versions import (
    AdapterVersion,
    active_adapter_chosen_at,
    get_version,
    latest_ready,
    previous_ready,
    set_active_adapter,
)
from clawdesk.store.versions import active_adapter as active_version

__all__ = [
    "ACTIVE_KEY",
    "AdapterSwitch",
    "active_version",
    "check_servable",
    "previous_ready",
    "select",
    "trained_since_choice",
]


def check_servable(row: AdapterVersion, base_sha256: str, base_name: str) -> None:
    """Raise AdapterError unless ``row`` may be served on the model with ``base_sha256``."""
    if row.status != "ready":
        raise AdapterError(
            f"adapter v{row.version} was rejected at validation ({row.note or 'see metadata'}); it is never served."
        )
    if row.base_sha256 != base_sha256:
        raise AdapterError(
            f"adapter v{row.version} was trained on {row.base_name} (sha256 {row.base_sha256[:12]}…) "
            f"but the chat serves {base_name} (sha256 {base_sha256[:12]}…). "
            "Serve that model with --model, or pick another version."
        )
    from clawdesk.gguf.adapters import check_version_dir

    # A missing, damaged, truncated or foreign file (metadata for another base, not a GGUF LoRA) is
    # refused here with its name, before llama.cpp parses it; Engine.load_adapter checks the shapes.
    check_version_dir(row.path, base_sha256=base_sha256)


def select(store: Store, n: int | None, *, base_sha256: str, base_name: str) -> None:
    """Persist the version to serve (None = base weights) after checking it fits the model."""
    if n is not None:
        check_servable(get_version(store, n), base_sha256, base_name)
    set_active_adapter(store, n)


def trained_since_choice(store: Store, base_sha256: str) -> int | None:
    """The newest ready version for this base if it was made after the serving choice was last set."""
    newest = latest_ready(store, base_sha256)
    if newest is None:
        return None
    chosen_at = active_adapter_chosen_at(store)
    return newest.version if newest.created_at > chosen_at and newest.version != active_version(store) else None


class AdapterSwitch:
    """Keeps the engine's adapter in step with the ``active_adapter`` setting."""

    def __init__(self, engine: Engine, store: Store):
        self.engine = engine
        self.store = store

    def activate(self, n: int | None) -> None:
        ident = self.engine.identity
        if n is None:
            self.engine.clear_adapter()
            set_active_adapter(self.store, None)
            return
        row = get_version(self.store, n)
        try:
            check_servable(row, ident.sha256, ident.name)
            self.engine.load_adapter(row.gguf_path, n)  # all or nothing: a failure keeps what is served
        except AdapterError as err:
            raise AdapterError(f"{str(err).rstrip('.')}. The chat keeps serving {self.serving()}.") from err
        set_active_adapter(self.store, n)

    def serving(self) -> str:
        """What the engine serves now, for messages: ``"v3"`` or ``"the base model"``."""
        n = self.engine.adapter_version
        return "the base model" if n is None else f"v{n}"

    def _serve_older_than(self, version: int) -> int | None:
        """Activate the newest ready version before ``version`` that can be served; None when none can."""
        before = version
        while (older := previous_ready(self.store, before, self.engine.identity.sha256)) is not None:
            try:
                self.activate(older)
                return older
            except AdapterError:
                before = older
        return None

    def rollback(self) -> int | None:
        """Serve the previous ready version (or the base weights when there is none)."""
        target = previous_ready(self.store, self.engine.adapter_version, self.engine.identity.sha256)
        self.activate(target)
        return target

    def sync(self) -> str | None:
        """Apply the persisted choice if it differs from what the engine serves.

        A version trained *after* the choice was last made (the app closed while its trainer
        process was still running) becomes the choice first; a later rollback or `use` is newer
        than the version and is respected. Returns a message when the persisted version cannot be
        served (missing or damaged file, refused by llama.cpp): the engine then keeps what it
        served before and that becomes the persisted choice, so a bad version never blocks the
        chat nor takes the last good adapter away.
        """
        newer = trained_since_choice(self.store, self.engine.identity.sha256)
        if newer is not None:
            set_active_adapter(self.store, newer)
        want = active_version(self.store)
        if want == self.engine.adapter_version:
            return None
        try:
            self.activate(want)
        except AdapterError as err:
            if self.engine.adapter_version is None and want is not None:
                # Nothing served yet (a fresh start): fall back to the newest older version that
                # loads, rather than to the base, so a damaged file does not undo what was learned.
                fallback = self._serve_older_than(want)
                if fallback is not None:
                    return f"{str(err).split('. The chat keeps serving')[0]}. Serving v{fallback} instead."
            set_active_adapter(self.store, self.engine.adapter_version)
            return str(err)
        except NotFoundError as err:
            set_active_adapter(self.store, self.engine.adapter_version)
            return f"{str(err).rstrip('.')}. The chat keeps serving {self.serving()}."
        return None
