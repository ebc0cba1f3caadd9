"""The rules about the log that several queries share, each written once, as SQL predicates.

Which turns may be learned from and which steps are tool steps are decided here and nowhere else:
the judge's queue (:mod:`clawdesk.store.judgments`, :mod:`clawdesk.store.step_judgments`), the
training samples (:mod:`clawdesk.store.samples`), the exported data and the chat's tool trail all
build their ``WHERE`` from these functions. They are predicates rather than a view so that each
query keeps the join order and partial index it was tuned for (m006); the aliases name the rows
the caller already joined.
"""

from __future__ import annotations


def learnable_turn(t: str = "t", s: str = "s", f: str = "f") -> str:
    """SQL: the turn ``t`` may be learned from (judged, trained on, exported).

    Learning was ON when it happened (``turns.learning``), its session ``s`` is not incognito, and
    the person did not veto it (``feedback.vetoed``; ``f`` is a LEFT JOIN of ``feedback`` on the turn).
    """
    return f"({t}.learning = 1 AND {s}.incognito = 0 AND coalesce({f}.vetoed, 0) = 0)"


def final_step(st: str = "st") -> str:
    """SQL: the step ``st`` is its turn's last model call, the answer (judged and trained as the turn itself).

    Every other step of an agent-loop turn is a *tool step*: it asked for tools, and its next state
    is their results.
    """
    return f"({st}.idx = (SELECT max(fin.idx) FROM steps fin WHERE fin.turn_id = {st}.turn_id))"


def tool_step(st: str = "st") -> str:
    """SQL: the step ``st`` is not its turn's last (see :func:`final_step`)."""
    return f"(NOT {final_step(st)})"
