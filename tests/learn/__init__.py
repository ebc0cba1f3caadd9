"""Tests of clawdesk/learn/: samples, the objective, the learner, the guard and the trainer process."""
