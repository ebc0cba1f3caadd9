"""The transformers config of a streamed training base, read from the GGUF header alone.

transformers 5.25 builds the config of a llama / qwen2 / qwen3 GGUF (``AutoConfig.from_pretrained(...,
gguf_file=...)``, its legacy reader) with ``gguf.GGUFReader`` over the whole metadata: a numpy view
per vocabulary item and merge, 3.7 s for the demo model's 49k tokens and 10.3 s for a file with
Qwen3's 151k (this VM, 2026-12-04), paid at every trainer start. The config needs none of those
arrays, only scalars and the length of the token list. Here transformers' own key table
(``GGUF_TO_TRANSFORMERS_MAPPING["config"]`` and its per-architecture defaults) is applied to the
fields of :func:`clawdesk.gguf.header.read_header`, which skips arrays (milliseconds), and the
dict becomes a config the way ``AutoConfig`` makes one (``CONFIG_MAPPING[model_type].from_dict``).

Where the legacy reader does something this does not reproduce (an architecture outside
:data:`CONFIG_ARCHS`, a llama whose name makes transformers call it mistral, a mapped key whose
value is an array) :func:`config_of` returns None and the caller asks transformers. Equality with
transformers' own config, key by key, is a test (``tests/learn/test_gguf_config.py``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from clawdesk.gguf.header import GGUFHeader
from clawdesk.learn.offline import import_offline

# Architectures whose legacy config transformers builds from the key table, the defaults and the
# output tensor alone (no other tensor-dependent key, no renamed model type): those ClawDesk streams.
CONFIG_ARCHS = ("llama", "qwen2", "qwen3")


def config_dict(header: GGUFHeader) -> dict[str, Any] | None:
    """The config dict transformers' legacy GGUF reader makes of ``header``, or None where it may differ."""
    import_offline()
    try:
        from transformers.modeling_gguf_pytorch_utils import GGUF_CONFIG_DEFAULTS_MAPPING, GGUF_TO_TRANSFORMERS_MAPPING
    except ImportError:  # a transformers that moved its table: its own reader still works, only slower
        return None

    fields = header.fields
    arch = fields.get("general.architecture")
    name = fields.get("general.name")
    if arch not in CONFIG_ARCHS or (arch == "llama" and isinstance(name, str) and "mistral" in name.lower()):
        return None
    table = GGUF_TO_TRANSFORMERS_MAPPING["config"]
    # llama.cpp writes the output projection only when it is not the embedding matrix.
    config: dict[str, Any] = {"tie_word_embeddings": all(t.name != "output.weight" for t in header.tensors)}
    for key, value in GGUF_CONFIG_DEFAULTS_MAPPING.get(arch, {}).items():
        config.setdefault(key, value)
    for key, value in fields.items():
        prefix, _, rest = key.partition(".")
        target = table.get(prefix, {}).get(rest)
        if target is None or target == -1:
            continue
        if value is None:  # an array the header skipped: not a config this reproduces
            return None
        config[target] = value
    if "vocab_size" not in config and "tokenizer.ggml.tokens" in header.array_lengths:
        config["vocab_size"] = header.array_lengths["tokenizer.ggml.tokens"]
    return config


def config_of(path: Path, header: GGUFHeader):
    """``AutoConfig.from_pretrained(path.parent, gguf_file=path.name)`` from the header, or None (see module doc)."""
    import_offline()
    from transformers import CONFIG_MAPPING

    values = config_dict(header)
    if values is None or values.get("model_type") not in CONFIG_MAPPING:
        return None
    config = CONFIG_MAPPING[values["model_type"]].from_dict(values)
    config._name_or_path = str(path.parent)  # what from_pretrained records (PEFT writes it as the base's name)
    return config


@contextlib.contextmanager
def name_maps_built_once() -> Iterator[None]:
    """While inside, ``gguf.get_tensor_name_map`` returns one map per (architecture, layers).

    transformers' ``get_gguf_hf_weights_map`` recurses into every submodule and builds the whole
    GGUF name table again at each (398 times for the demo model, 22 ms each: 8.8 s of what was a
    15.7 s base load). The map is a pure function of its arguments, so the result is the same dict.
    """
    import gguf

    original = gguf.get_tensor_name_map
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(original)
    try:
        yield
    finally:
        gguf.get_tensor_name_map = original
