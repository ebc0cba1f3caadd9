"""Tests of clawdesk/loop/: the headless learning loop."""
