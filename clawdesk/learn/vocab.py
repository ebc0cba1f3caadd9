"""The base GGUF's vocabulary in the trainer process: text to token ids and back, without the model.

The trainer has no llama.cpp engine (the chat process owns that), so it reads the GGUF's vocabulary
alone: llama.cpp loads it with ``vocab_only`` (no weights, no context, ~0.1 s). Owns
:func:`first_turn_ids` (the guard's and the anchor's texts as the chat would render them) and
:func:`detokenize` (the text of replies the trainer generated, for the learned check's behaviour test).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from clawdesk.engine.prompt import build_messages, gguf_chat_template
from clawdesk.errors import TrainError


@contextmanager
def _vocab(base_gguf: Path) -> Iterator[Any]:
    import llama_cpp
    from llama_cpp import _internals

    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    try:
        model = _internals.LlamaModel(path_model=str(base_gguf), params=params, verbose=False)
    except (ValueError, RuntimeError, OSError) as exc:
        raise TrainError(f"llama.cpp could not read the vocabulary of {base_gguf} ({exc}).") from exc
    try:
        yield model
    finally:
        model.close()


def first_turn_ids(
    base_gguf: Path, texts: list[str], *, system_prompt: str = "", plain: bool = False
) -> list[list[int]]:
    """Token ids of each text under ``base_gguf``'s vocabulary: rendered as a first chat turn under
    ``system_prompt`` as the chat would (the generation prompt included), or ``plain`` as bare text."""
    with _vocab(base_gguf) as model:
        if plain:
            return [model.tokenize(t.encode("utf-8"), add_bos=False, special=False) for t in texts]
        chat, add_bos = gguf_chat_template(model, model.metadata(), base_gguf)  # as the engine reads it
        out = []
        for text in texts:
            rendered = chat.render(build_messages(system_prompt, [], text), thinking=False)
            out.append(model.tokenize(rendered.encode("utf-8"), add_bos=add_bos, special=True))
        return out


def detokenize(base_gguf: Path, replies: Sequence[Sequence[int]]) -> list[str]:
    """Each reply's text; special tokens (an end-of-turn the sampler kept) are left out, as the chat shows it."""
    with _vocab(base_gguf) as model:
        return [model.detokenize(list(ids), special=False).decode("utf-8", errors="replace") for ids in replies]
