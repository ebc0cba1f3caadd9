"""Tests of clawdesk/testing/: the tiny random Qwen3 GGUF."""
