"""Tests of clawdesk/engine/: the llama.cpp engine, its cache, threads, preemption and prompt rendering."""
