"""Tests of clawdesk/eval/: personas and `clawdesk eval` runs."""
