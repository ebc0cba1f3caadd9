"""Evaluation stage: simulated users (personas), held-out scoring, the judge set, reports."""
