"""The learning stack's first import, kept off the network.

bitsandbytes (0.50 here) on a CPU with AVX512-BF16 asks the ``kernels`` package, a dependency of
transformers 5, to fetch ``kernels-community/quantization-bitsandbytes`` from the Hugging Face Hub
when it is imported: a connection to huggingface.co and code from the network, on every training
run and every export. ClawDesk reaches the network only in an explicit ``clawdesk pull``, so
bitsandbytes is first imported here (before peft or transformers can import it) with the Hub in
offline mode; it then keeps its built-in CPU kernels. Measured on the dev VM: two connection
attempts to huggingface.co per import without this, none with it (tests/system/test_privacy.py).
"""

from __future__ import annotations

import contextlib
import logging
import sys


def import_offline() -> None:
    """Import bitsandbytes (if installed) with the Hub offline; call before importing peft or transformers."""
    if "bitsandbytes" in sys.modules:
        return
    # Its CPU backend and `kernels` log a warning each when the Hub fetch is refused ("Skipping publisher
    # trust check ..."); the fetch is refused on purpose, so neither line is news to the person.
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    logging.getLogger("kernels").setLevel(logging.ERROR)
    import huggingface_hub.constants as hub

    offline = hub.HF_HUB_OFFLINE
    hub.HF_HUB_OFFLINE = True  # read at request time; only this import sees it (a later pull still works)
    try:
        with contextlib.suppress(ImportError):  # not installed: peft and transformers run without it
            import bitsandbytes  # noqa: F401
    finally:
        hub.HF_HUB_OFFLINE = offline
