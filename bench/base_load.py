"""Loading the training base: the streamed loader against transformers' own config reader and name map.

Prints, for the bundled demo GGUF (and any GGUF given as an argument), in this one process:
the config from the header (``learn/gguf_config.py``) against ``AutoConfig.from_pretrained(gguf_file=...)``,
transformers' tensor-name map with gguf's name tables built once against built per submodule, and
``load_streamed`` end to end (first and second load). The numbers in docs/benchmarks.md "Loading the
training base" come from ``python bench/base_load.py``; the "before" load is that of the tree before
(``git stash`` or a worktree of 2366619^, same command). Asserts nothing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def _timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - t0


def measure(path: Path) -> None:
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor, get_gguf_hf_weights_map

    from clawdesk.gguf.header import read_header
    from clawdesk.learn.gguf_config import config_of, name_maps_built_once
    from clawdesk.learn.gguf_weights import load_streamed

    header = read_header(path)
    arch = header.fields["general.architecture"]
    ours, t_ours = _timed(config_of, path, header)
    theirs, t_theirs = _timed(AutoConfig.from_pretrained, str(path.parent), gguf_file=path.name)
    same = ours.to_dict() == theirs.to_dict()
    print(f"{path.name}: config from the header {t_ours:.3f} s, transformers' reader {t_theirs:.2f} s, equal {same}")
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(theirs, dtype=torch.float32)
    processor = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config=theirs.to_dict())
    plain, t_plain = _timed(get_gguf_hf_weights_map, model, processor)
    with name_maps_built_once():
        once, t_once = _timed(get_gguf_hf_weights_map, model, processor)
    print(
        f"{path.name}: name map {t_plain:.2f} s rebuilt per submodule, {t_once:.3f} s built once, equal {plain == once}"
    )
    _, first = _timed(load_streamed, path, arch, torch.float32)
    _, second = _timed(load_streamed, path, arch, torch.float32)
    print(f"{path.name}: load_streamed {first:.1f} s, again {second:.1f} s")


def main(argv: list[str]) -> int:
    from clawdesk.models import bundled_demo_path

    for path in [Path(a) for a in argv] or [bundled_demo_path()]:
        measure(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
