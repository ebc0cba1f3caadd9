"""Tests of clawdesk/cli/: the commands as a person runs them, and their bad input."""
