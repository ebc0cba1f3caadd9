"""Hot-swapping GGUF LoRA adapters into the running llama.cpp engine (real SmolLM2)."""

import threading
import time

import pytest

from clawdesk.engine import SamplingParams
from clawdesk.errors import AdapterError
from clawdesk.reload import ACTIVE_KEY, AdapterSwitch, active_version, select
from tests.support.demo_lora import add_version

GREEDY = SamplingParams(temperature=0.0, max_tokens=8)


@pytest.fixture
def switch(engine, store):
    sw = AdapterSwitch(engine, store)
    yield sw
    engine.clear_adapter()


def test_swap_changes_output_without_reloading_the_base(engine, store, switch, tmp_path):
    add_version(store, tmp_path, 1)
    prompt = engine.build_prompt("", [], "Name three fruits.", thinking=False, reply_room=64).token_ids
    model_before = engine.llm._model.model
    base = engine.generate(prompt, GREEDY)
    switch.activate(1)
    tuned = engine.generate(prompt, GREEDY)
    assert engine.llm._model.model == model_before  # same native model: no reload
    assert tuned.adapter_version == 1 and base.adapter_version is None
    assert tuned.reply_ids != base.reply_ids
    assert active_version(store) == 1
    # Base weights on demand (the judge) and back, with no stale KV reuse in between.
    assert engine.generate(prompt, GREEDY, use_adapter=False).reply_ids == base.reply_ids
    assert engine.generate(prompt, GREEDY).reply_ids == tuned.reply_ids
    switch.activate(None)
    assert engine.generate(prompt, GREEDY).reply_ids == base.reply_ids
    assert store.get_setting(ACTIVE_KEY) is None


def test_reply_in_progress_finishes_on_the_old_adapter(engine, store, switch, tmp_path):
    add_version(store, tmp_path, 1)
    prompt = engine.build_prompt("", [], "Tell me a long story.", thinking=False, reply_room=64).token_ids
    started = threading.Event()
    result = {}

    def chat():
        result["reply"] = engine.generate(
            prompt, SamplingParams(temperature=0.0, max_tokens=40), on_delta=lambda d: started.set()
        )
        result["done_at"] = time.monotonic()

    worker = threading.Thread(target=chat)
    worker.start()
    assert started.wait(30)
    switch.activate(1)  # blocks on the engine lock until the reply is done
    swapped_at = time.monotonic()
    worker.join()
    assert swapped_at >= result["done_at"]
    assert result["reply"].adapter_version is None and result["reply"].status in ("finished", "length")
    assert engine.adapter_version == 1


def test_rejected_and_foreign_adapters_are_refused(engine, store, switch, tmp_path):
    add_version(store, tmp_path, 1, status="rejected")
    add_version(store, tmp_path, 2, sha="f" * 64, seed=1)
    with pytest.raises(AdapterError, match="rejected"):
        switch.activate(1)
    with pytest.raises(AdapterError, match="trained on smollm2-135m"):
        switch.activate(2)
    with pytest.raises(AdapterError):
        select(store, 1, base_sha256="test-sha", base_name="x")
    assert engine.adapter_version is None and active_version(store) is None


def test_rollback_and_sync(engine, store, switch, tmp_path):
    add_version(store, tmp_path, 1)
    add_version(store, tmp_path, 2, seed=2)
    add_version(store, tmp_path, 3, status="rejected", seed=3)
    switch.activate(2)
    assert switch.rollback() == 1 and engine.adapter_version == 1
    assert switch.rollback() is None and engine.adapter_version is None
    # The persisted choice (e.g. from `clawdesk adapters use 2`) is applied by sync().
    store.set_setting(ACTIVE_KEY, 2)
    assert switch.sync() is None and engine.adapter_version == 2
    # A persisted choice that cannot be served keeps what is served (v2), with a message (issue #7).
    store.set_setting(ACTIVE_KEY, 3)
    message = switch.sync()
    assert message and "rejected" in message and "keeps serving v2" in message and engine.adapter_version == 2
    assert active_version(store) == 2


def test_version_trained_after_the_last_choice_is_served_on_sync(engine, store, switch, tmp_path):
    """The app closed while its trainer ran: the next start serves the new version, but a later
    rollback (a newer choice) is respected."""
    add_version(store, tmp_path, 1)
    switch.activate(1)
    time.sleep(0.01)  # timestamps have millisecond resolution
    add_version(store, tmp_path, 2, seed=2)  # finished after the choice was made
    assert switch.sync() is None and engine.adapter_version == 2 and active_version(store) == 2
    time.sleep(0.01)
    assert switch.rollback() == 1
    assert switch.sync() is None and engine.adapter_version == 1  # the rollback is newer than v2
