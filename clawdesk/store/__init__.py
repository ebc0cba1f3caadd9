"""Record stage: the local SQLite turn log (sessions, turns, token ids, settings)."""

from clawdesk.store.log import NewTurn, Session, Store, Turn, now_iso

__all__ = ["NewTurn", "Session", "Store", "Turn", "now_iso"]
