"""Tests of clawdesk/serve/: the OpenAI-compatible endpoint."""
