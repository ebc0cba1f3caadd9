"""Reload stage: which adapter version the chat serves, and hot-swapping it into the engine.

The active version is a persisted setting (``active_adapter``), so it survives restarts and a
version chosen with ``clawdesk adapters use N`` is what the next chat serves. Swapping goes
through :meth:`Engine.load_adapter`, which takes the engine lock: a reply in progress finishes
on the old adapter, the next one uses the new adapter, and the base model is never reloaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawdesk.engine import Engine
from clawdesk.errors import AdapterError, NotFoundError
from clawdesk.store import Store

ACTIVE_KEY = "active_adapter"
GGUF_NAME = "adapter.gguf"


@dataclass(frozen=True)
class VersionRow:
    version: int
    status: str
    base_name: str
    base_sha256: str
    path: Path
    n_samples: int
    metrics: dict[str, Any]
    note: str
    created_at: str

    @property
    def gguf(self) -> Path:
        return self.path / GGUF_NAME


def _row(r: dict[str, Any]) -> VersionRow:
    return VersionRow(
        version=r["version"],
        status=r["status"],
        base_name=r["base_name"],
        base_sha256=r["base_sha256"],
        path=Path(r["path"]),
        n_samples=r["n_samples"],
        metrics=json.loads(r["metrics"] or "{}"),
        note=r["note"] or "",
        created_at=r["created_at"],
    )


def versions(store: Store) -> list[VersionRow]:
    return [_row(r) for r in store.db.query("SELECT * FROM adapters ORDER BY version")]


def version(store: Store, n: int) -> VersionRow:
    rows = list(store.db.query("SELECT * FROM adapters WHERE version = ?", [n]))
    if not rows:
        raise NotFoundError(f"there is no adapter v{n}; `clawdesk adapters list` shows the versions")
    return _row(rows[0])


def active_version(store: Store) -> int | None:
    value = store.get_setting(ACTIVE_KEY)
    return int(value) if value is not None else None


def check_servable(row: VersionRow, base_sha256: str, base_name: str) -> None:
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
    if not row.gguf.is_file():
        raise AdapterError(f"adapter v{row.version} has no {GGUF_NAME} at {row.gguf}; it may have been deleted.")


def select(store: Store, n: int | None, *, base_sha256: str, base_name: str) -> None:
    """Persist the version to serve (None = base weights) after checking it fits the model."""
    if n is not None:
        check_servable(version(store, n), base_sha256, base_name)
    store.set_setting(ACTIVE_KEY, n)


def previous_ready(store: Store, before: int | None, base_sha256: str) -> int | None:
    """The newest servable version older than ``before`` (any, when ``before`` is None)."""
    candidates = [
        v.version
        for v in versions(store)
        if v.status == "ready" and v.base_sha256 == base_sha256 and (before is None or v.version < before)
    ]
    return candidates[-1] if candidates else None


class AdapterSwitch:
    """Keeps the engine's adapter in step with the ``active_adapter`` setting."""

    def __init__(self, engine: Engine, store: Store):
        self.engine = engine
        self.store = store

    def activate(self, n: int | None) -> None:
        ident = self.engine.identity
        if n is None:
            self.engine.clear_adapter()
            self.store.set_setting(ACTIVE_KEY, None)
            return
        row = version(self.store, n)
        check_servable(row, ident.sha256, ident.name)
        self.engine.load_adapter(row.gguf, n)
        self.store.set_setting(ACTIVE_KEY, n)

    def rollback(self) -> int | None:
        """Serve the previous ready version (or the base weights when there is none)."""
        target = previous_ready(self.store, self.engine.adapter_version, self.engine.identity.sha256)
        self.activate(target)
        return target

    def sync(self) -> str | None:
        """Apply the persisted choice if it differs from what the engine serves.

        Returns a message when the persisted version cannot be served (it is then cleared), so
        a bad choice never blocks the chat.
        """
        want = active_version(self.store)
        if want == self.engine.adapter_version:
            return None
        try:
            self.activate(want)
        except (AdapterError, NotFoundError) as err:
            self.engine.clear_adapter()
            self.store.set_setting(ACTIVE_KEY, None)
            return f"serving the base model: {err}"
        return None
