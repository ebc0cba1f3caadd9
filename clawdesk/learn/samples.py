"""The learner's samples: what the trainer trains on and holds out, read from the log.

The selection rules (judged, same base, learnable, with a signal, never trained on before; tool
steps with their step reward) and the SQL live in the store, :mod:`clawdesk.store.samples`, which
owns every rule about data; this module is the learning stage's name for them.
"""

from __future__ import annotations

from clawdesk.store.samples import Sample, count_ready, heldout_replies, ready_samples

__all__ = ["Sample", "count_ready", "heldout_replies", "ready_samples"]
