"""Record stage: the local SQLite turn log, and the one owner of SQL and of every rule about the data.

Nothing outside this package runs SQL: the other stages call its functions (sessions and turns in
:mod:`~clawdesk.store.log`, samples, versions, judgments, steps, integrity checks), and the rules
several queries share are written once in :mod:`~clawdesk.store.rules`.
"""

from clawdesk.store.log import NewTurn, Session, Store, Turn, now_iso

__all__ = ["NewTurn", "Session", "Store", "Turn", "now_iso"]
