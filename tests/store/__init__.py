"""Tests of clawdesk/store/: the SQLite log, its rules and forgetting."""
