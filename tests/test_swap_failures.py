"""Swap failures (issue #7): an adapter that is deleted, damaged or refused by llama.cpp keeps the previous one.

Real llama.cpp engine on the demo model with real GGUF LoRA files; the one fake is llama.cpp's
``llama_set_adapters_lora`` refusing a new adapter (the native boundary), which no real file
triggers on demand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clawdesk.engine import SamplingParams
from clawdesk.errors import AdapterError
from clawdesk.learn import versions
from clawdesk.reload import ACTIVE_KEY, AdapterSwitch, active_version
from clawdesk.store import Store
from tests.support.demo_lora import add_version_row, lora_state, write_demo_gguf

GREEDY = SamplingParams(temperature=0.0, max_tokens=8)

# -- 6. swap failures: a deleted, garbage or refused adapter keeps the previous one (issue #7) ------


def _version(store: Store, root: Path, n: int, *, seed: int) -> Path:
    """A ready adapters row for the demo engine (sha 'test-sha') with a real random GGUF LoRA."""
    vdir = root / f"v{n}"
    vdir.mkdir()
    write_demo_gguf(lora_state(seed), vdir / versions.ADAPTER_GGUF)
    add_version_row(store, vdir, n)
    return vdir / versions.ADAPTER_GGUF


@pytest.fixture
def served_v1(engine, store, tmp_path):
    """The demo engine serving v1; yields (switch, prompt, v1's greedy reply ids, v2's adapter file)."""
    _version(store, tmp_path, 1, seed=1)
    switch = AdapterSwitch(engine, store)
    switch.activate(1)
    prompt = engine.build_prompt("", [], "Name three fruits.", thinking=False, reply_room=64).token_ids
    engine.reset_cache()  # a reused prompt prefix changes low logit bits (README); compare fresh replies
    with_v1 = engine.generate(prompt, GREEDY).reply_ids
    assert with_v1 != engine.generate(prompt, GREEDY, use_adapter=False).reply_ids  # v1 really changes replies
    v2 = _version(store, tmp_path, 2, seed=2)
    yield switch, prompt, with_v1, v2
    engine.clear_adapter()


def _still_v1(switch, prompt, with_v1) -> None:
    engine = switch.engine
    assert engine.adapter_version == 1
    engine.reset_cache()
    reply = engine.generate(prompt, GREEDY)
    assert reply.adapter_version == 1 and reply.reply_ids == with_v1


@pytest.mark.parametrize("damage", ["deleted", "garbage", "truncated"])
def test_unloadable_adapter_keeps_the_previous_one(served_v1, store, damage):
    switch, prompt, with_v1, v2 = served_v1
    if damage == "deleted":
        v2.unlink()
    elif damage == "garbage":
        v2.write_bytes(b"this is not a GGUF file at all" * 100)
    else:
        v2.write_bytes(v2.read_bytes()[:4096])
    with pytest.raises(AdapterError, match="keeps serving v1"):
        switch.activate(2)
    _still_v1(switch, prompt, with_v1)
    assert active_version(store) == 1
    # The same through sync(): the persisted choice names v2 (`clawdesk adapters use 2` before the damage).
    store.set_setting(ACTIVE_KEY, 2)
    message = switch.sync()
    assert message and "v2" in message and "keeps serving v1" in message
    _still_v1(switch, prompt, with_v1)
    assert active_version(store) == 1 and switch.sync() is None  # settled: not retried on every reply


def test_adapter_refused_by_llama_cpp_at_swap_time_keeps_the_previous_one(served_v1, store, monkeypatch):
    """llama_set_adapters_lora failing for the new adapter (the native boundary is the only fake)."""
    import llama_cpp

    switch, prompt, with_v1, _ = served_v1
    real = llama_cpp.llama_set_adapters_lora
    served = switch.engine._lora.handle

    def refuse_new(ctx, adapters, n, scales):
        if n and ctypes_value(adapters[0]) != ctypes_value(served):
            return -1
        return real(ctx, adapters, n, scales)

    monkeypatch.setattr(llama_cpp, "llama_set_adapters_lora", refuse_new)
    with pytest.raises(AdapterError, match=r"refused.*keeps serving v1"):
        switch.activate(2)
    _still_v1(switch, prompt, with_v1)
    store.set_setting(ACTIVE_KEY, 2)
    assert "keeps serving v1" in switch.sync()
    _still_v1(switch, prompt, with_v1)
    monkeypatch.undo()
    switch.activate(2)  # the same file is fine once llama.cpp accepts it
    assert switch.engine.adapter_version == 2 and switch.engine.generate(prompt, GREEDY).reply_ids != with_v1


def ctypes_value(pointer) -> int | None:
    """The address a llama_adapter_lora_p (a ctypes pointer) points to, for comparisons."""
    import ctypes

    return ctypes.cast(pointer, ctypes.c_void_p).value


def test_fresh_start_with_a_damaged_choice_serves_the_newest_older_version(served_v1, store, tmp_path):
    """A new `clawdesk ask` or app (nothing served yet) whose chosen v3 is damaged serves v2, not the base."""
    switch, prompt, with_v1, v2 = served_v1
    v3 = _version(store, tmp_path, 3, seed=3)
    v3.write_bytes(v3.read_bytes()[:4096])
    switch.engine.clear_adapter()  # as a process that has just loaded the base
    store.set_setting(ACTIVE_KEY, 3)
    message = switch.sync()
    assert message and "v3" in message and "Serving v2 instead" in message
    assert switch.engine.adapter_version == 2 and active_version(store) == 2
    assert switch.sync() is None  # settled
    v2.write_bytes(b"not a GGUF")  # now v2 is damaged too: the next fresh start falls back to v1
    switch.engine.clear_adapter()
    store.set_setting(ACTIVE_KEY, 3)
    assert "Serving v1 instead" in switch.sync()
    _still_v1(switch, prompt, with_v1)
