"""The rules about the log that several queries share, each written once, as SQL predicates.

Which turns may be learned from, which steps are tool steps and which judgment is a turn's own are
decided here and nowhere else: the judge's queue (:mod:`clawdesk.store.judgments`,
:mod:`clawdesk.store.step_judgments`), the training samples (:mod:`clawdesk.store.samples`), the
exported data and the chat's tool trail all build their ``WHERE`` from these functions. They are
predicates rather than a view so that each query keeps the join order and partial index it was
tuned for (m006); the aliases name the rows the caller already joined.
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


def turn_judged(t: str = "t") -> str:
    """SQL: the turn ``t`` has its own judgment, judged or dropped for want of a next message.

    Judgments are keyed by step (m007); a turn's own is the one judged from the user
    (``next_state = 'user'``), which only its final step gets.
    """
    return (
        "EXISTS (SELECT 1 FROM steps own JOIN judgments oj ON oj.step_id = own.id"
        f" WHERE own.turn_id = {t}.id AND oj.next_state = 'user')"
    )


def turn_outcome_join(t: str = "t", o: str = "o") -> str:
    """SQL: ``LEFT JOIN`` the turn ``t``'s own judgment as ``o`` (NULL columns when it has none).

    A tool step's reward starts from its turn's outcome o, which that judgment (or the thumbs) gives.
    """
    return (
        f"LEFT JOIN judgments {o} ON {o}.next_state = 'user'"
        f" AND {o}.step_id IN (SELECT own.id FROM steps own WHERE own.turn_id = {t}.id)"
    )
