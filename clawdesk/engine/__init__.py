"""Chat-engine stage: llama.cpp serving with the GGUF's own chat template."""

from clawdesk.engine.llama import Delta, Engine, ModelIdentity, Reply, SamplingParams, history_from_turns
from clawdesk.engine.prompt import Exchange, Prompt, split_thinking

__all__ = [
    "Delta",
    "Engine",
    "Exchange",
    "ModelIdentity",
    "Prompt",
    "Reply",
    "SamplingParams",
    "history_from_turns",
    "split_thinking",
]
