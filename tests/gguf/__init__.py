"""Tests of clawdesk/gguf/: the header reader, the LoRA writer and the adapter-file checks."""
