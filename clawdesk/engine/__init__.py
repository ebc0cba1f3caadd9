"""Chat-engine stage: llama.cpp serving with the GGUF's own chat template."""

from clawdesk.engine.llama import Engine
from clawdesk.engine.prompt import Exchange, Prompt, history_from_turns, split_thinking
from clawdesk.engine.reply import Delta, ModelIdentity, Reply, SamplingParams

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
