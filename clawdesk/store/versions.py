"""The log's record of adapter versions: ``adapters`` rows, the samples each was trained on, and which one is served.

A version's files (``<adapters dir>/v<N>``) are written and checked by :mod:`clawdesk.learn.versions`;
this module owns the rows. The row and its ``adapter_samples`` rows (one per step trained on: a
turn's final step for its own sample, or a tool step; migration m007) are written in one
transaction (:func:`record_version`), and a step is trained on once (``adapter_samples.step_id``
is UNIQUE). Which version the chat serves is the ``active_adapter`` setting, read and
written only here (:func:`active_adapter`, :func:`set_active_adapter`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawdesk.errors import NotFoundError, TrainError
from clawdesk.store.log import Store
from clawdesk.store.rules import final_step
from clawdesk.store.samples import Sample

ADAPTER_GGUF = "adapter.gguf"  # in each version's dir: the GGUF LoRA that llama.cpp serves
ACTIVE_ADAPTER = "active_adapter"  # the settings key: the version to serve, null = the base weights
STATUSES = ("ready", "rejected")


@dataclass(frozen=True)
class AdapterVersion:
    """One row of ``adapters``: a trained adapter, served only when ``status == 'ready'``."""

    version: int
    status: str  # 'ready' | 'rejected'
    parent_version: int | None
    base_name: str
    base_sha256: str
    path: Path
    n_samples: int
    metrics: dict[str, float]
    validation: dict[str, Any]
    note: str
    created_at: str

    @property
    def ready(self) -> bool:
        return self.status == "ready"

    @property
    def gguf_path(self) -> Path:
        """The GGUF LoRA to hand llama.cpp (``Engine.load_adapter``)."""
        return self.path / ADAPTER_GGUF

    @property
    def peft_dir(self) -> Path:
        """The PEFT adapter dir (``PeftModel.from_pretrained(base, peft_dir)``)."""
        return self.path

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> AdapterVersion:
        return cls(
            version=row["version"],
            status=row["status"],
            parent_version=row["parent_version"],
            base_name=row["base_name"],
            base_sha256=row["base_sha256"],
            path=Path(row["path"]),
            n_samples=row["n_samples"],
            metrics=json.loads(row["metrics"]),
            validation=json.loads(row["validation"]),
            note=row["note"],
            created_at=row["created_at"],
        )


def list_versions(store: Store, base_sha256: str | None = None) -> list[AdapterVersion]:
    """All adapter versions, oldest first; only those of one base when ``base_sha256`` is given."""
    sql, params = "SELECT * FROM adapters", []
    if base_sha256 is not None:
        sql, params = sql + " WHERE base_sha256 = ?", [base_sha256]
    return [AdapterVersion.from_row(r) for r in store.db.query(sql + " ORDER BY version", params)]


def get_version(store: Store, version: int) -> AdapterVersion:
    rows = list(store.db.query("SELECT * FROM adapters WHERE version = ?", [version]))
    if not rows:
        raise NotFoundError(f"there is no adapter version v{version}; `clawdesk train` makes them")
    return AdapterVersion.from_row(rows[0])


def latest_ready(store: Store, base_sha256: str) -> AdapterVersion | None:
    """The newest version that passed validation for this base: what to serve and to continue from."""
    rows = list(
        store.db.query(
            "SELECT * FROM adapters WHERE base_sha256 = ? AND status = 'ready' ORDER BY version DESC LIMIT 1",
            [base_sha256],
        )
    )
    return AdapterVersion.from_row(rows[0]) if rows else None


def previous_ready(store: Store, before: int | None, base_sha256: str) -> int | None:
    """The newest ready version of this base older than ``before`` (any, when ``before`` is None)."""
    # One row from the end of the primary key: a log of thousands of versions is not read (and parsed)
    # whole at every start, nor once per damaged version when the chat walks back past them.
    row = store.db.execute(
        "SELECT version FROM adapters WHERE status = 'ready' AND base_sha256 = ? AND version < ? "
        "ORDER BY version DESC LIMIT 1",
        [base_sha256, before if before is not None else 1 << 62],
    ).fetchone()
    return row[0] if row else None


def version_samples(store: Store, version: int) -> list[dict[str, Any]]:
    """The turns version ``version`` was trained on (their own samples): ``[{turn_id, reward, has_hint}]``."""
    rows = store.db.query(
        "SELECT st.turn_id, a.reward, a.has_hint FROM adapter_samples a JOIN steps st ON st.id = a.step_id"
        f" WHERE a.version = ? AND {final_step('st')} ORDER BY st.turn_id",
        [version],
    )
    return [{"turn_id": r["turn_id"], "reward": r["reward"], "has_hint": bool(r["has_hint"])} for r in rows]


def last_item_checks(store: Store) -> dict[int, tuple[int, dict[str, Any]]]:
    """Per preference item, the newest ready version's learned check of it: ``{item_id: (version, record)}``.

    The records are what :mod:`clawdesk.learn.consolidate` wrote into each version's
    ``validation["memory"]``; an item no version has checked yet is absent.
    """
    rows = store.db.execute(
        "SELECT a.version, j.value FROM adapters a, json_each(a.validation, '$.memory') j "
        "WHERE a.status = 'ready' ORDER BY a.version"
    ).fetchall()
    out: dict[int, tuple[int, dict[str, Any]]] = {}
    for version, value in rows:
        record = json.loads(value)
        out[record["item_id"]] = (version, record)  # oldest first: the newest check wins
    return out


def highest_version(store: Store) -> int:
    """The highest version number the log has recorded (0 when none)."""
    return int(store.db.execute("SELECT coalesce(max(version), 0) FROM adapters").fetchone()[0])


def record_version(
    store: Store,
    *,
    version: int,
    status: str,
    parent_version: int | None,
    base_name: str,
    base_sha256: str,
    path: Path,
    samples: Sequence[Sample],
    metrics: dict[str, float],
    validation: dict[str, Any],
    note: str,
    created_at: str,
) -> AdapterVersion:
    """Insert the ``adapters`` row and one ``adapter_samples`` row per sample, in one transaction.

    A turn's own sample is keyed by its final step, a tool-step sample by ``Sample.step_id``. Rejected
    versions record their samples too: they are spent either way, so a batch that wrecks the model
    is not retried forever. A sample some version already used raises :class:`TrainError` and
    nothing is written.
    """
    if status not in STATUSES:
        raise ValueError(f"bad adapter status {status!r}")
    with store.transaction():
        step_ids = [_step_of(store, s) for s in samples]
        final, marks = final_step("st"), ",".join("?" * len(step_ids))
        used = store.db.execute(
            f"SELECT CASE WHEN {final} THEN 'turn' ELSE 'tool step' END, CASE WHEN {final} THEN st.turn_id"
            f" ELSE st.id END, a.version FROM adapter_samples a JOIN steps st ON st.id = a.step_id"
            f" WHERE a.step_id IN ({marks}) ORDER BY st.turn_id, st.idx",
            step_ids,
        ).fetchall()
        if used:
            spent = ", ".join(f"{kind} {t} (v{v})" for kind, t, v in used)
            raise TrainError(
                f"Cannot record v{version}: {spent} were already trained on; each turn is used once. "
                "Was another training run going on at the same time? Nothing was recorded; train again."
            )
        store.db.execute(
            """INSERT INTO adapters(version, status, parent_version, base_name, base_sha256, path, n_samples,
                   metrics, validation, note, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            [
                version, status, parent_version, base_name, base_sha256, str(path), len(samples),
                json.dumps(metrics), json.dumps(validation), note, created_at,
            ],
        )  # fmt: skip
        for s, step_id in zip(samples, step_ids, strict=True):
            store.db.execute(
                "INSERT INTO adapter_samples(version, step_id, reward, has_hint) VALUES (?, ?, ?, ?)",
                [version, step_id, s.reward, int(s.has_hint)],
            )
    return get_version(store, version)


def _step_of(store: Store, sample: Sample) -> int:
    """The ``steps`` row a sample was taken from: its tool step, or its turn's final step."""
    if sample.step_id is not None:
        return sample.step_id
    row = store.db.execute(f"SELECT id FROM steps st WHERE st.turn_id = ? AND {final_step('st')}", [sample.turn_id])
    found = row.fetchone()
    if found is None:
        raise TrainError(f"Cannot record the sample of turn {sample.turn_id}: the turn is gone. Nothing was recorded.")
    return found[0]


# -- which version is served --------------------------------------------------------------------


def active_adapter(store: Store) -> int | None:
    """The version the chat is to serve (None = the base weights); persisted, so it survives restarts."""
    value = store.get_setting(ACTIVE_ADAPTER)
    return int(value) if value is not None else None


def set_active_adapter(store: Store, version: int | None) -> None:
    store.set_setting(ACTIVE_ADAPTER, version)


def active_adapter_chosen_at(store: Store) -> str:
    """When the served version was last set (ISO time; "" when never): a version made later is newer than the choice."""
    return store.setting_updated_at(ACTIVE_ADAPTER) or ""
