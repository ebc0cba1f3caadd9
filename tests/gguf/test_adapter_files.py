"""Adapter files are refused when damaged, foreign or not data-only formats; a good adapter passes.

Real files throughout: GGUF LoRAs written by the app's writer, safetensors, real pickles (whose
unpickling would create a marker dir), the served SmolLM2 in llama.cpp, and torch/peft on a tiny Qwen3.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil

import numpy as np
import pytest
from safetensors.numpy import save_file

from clawdesk.errors import AdapterError
from clawdesk.gguf.adapters import (
    BaseDims,
    check_gguf_lora,
    check_peft_dir,
    check_version_dir,
)
from clawdesk.gguf.lora import write_gguf_lora
from clawdesk.learn.peft_adapter import load_peft_adapter
from clawdesk.reload import AdapterSwitch
from tests.support.demo_lora import RANK, SHAPES, add_version_row, lora_state, write_version_dir


class _Marker:
    """Unpickling this creates ``path`` (a dir): proof that a pickle was executed."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def _state(*, layers=2, shapes=SHAPES, r=RANK, seed=0) -> dict[str, np.ndarray]:
    return lora_state(seed, r=r, layers=layers, shapes=shapes)


def _version_dir(path, *, sha="test-sha", arch="llama", layers=2, **state_kw):
    """A complete version dir for SmolLM2 as the trainer lays it out (GGUF, PEFT, metadata)."""
    return write_version_dir(path, sha=sha, arch=arch, layers=layers, **state_kw)


@pytest.fixture
def dims(engine) -> BaseDims:
    return BaseDims.from_metadata(engine.llm.metadata)


def test_base_dims_of_the_demo_model(dims):
    assert (dims.arch, dims.n_layer, dims.n_embd, dims.n_ff) == ("llama", 30, 576, 1536)
    assert [dims.in_out(k) for k in ("attn_q", "attn_k", "ffn_down")] == [(576, 576), (576, 192), (1536, 576)]


def test_a_good_adapter_passes_every_check(tmp_path, dims):
    vdir = _version_dir(tmp_path / "v1")
    info = check_version_dir(vdir, base_sha256="test-sha", arch="llama", dims=dims, peft=True)
    assert (info["arch"], info["rank"], info["n_tensors"], info["alpha"]) == ("llama", RANK, 28, 8.0)
    assert info["peft"] == {"rank": RANK, "n_tensors": 28}


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _header_only(path):
    path.write_bytes(path.read_bytes()[:20])


def _pickle_over(path):
    path.write_bytes(pickle.dumps({"lora": np.zeros(3)}))


def _empty(path):
    path.write_bytes(b"")


@pytest.mark.parametrize("damage", [_truncate, _header_only, _pickle_over, _empty, os.unlink])
@pytest.mark.parametrize("name", ["adapter.gguf", "adapter_model.safetensors"])
def test_each_damaged_file_is_refused_naming_it(tmp_path, dims, name, damage):
    vdir = _version_dir(tmp_path / "v1")
    damage(vdir / name)
    with pytest.raises(AdapterError) as err:
        check_version_dir(vdir, base_sha256="test-sha", dims=dims, peft=True)
    assert str(vdir / name) in str(err.value) and "clawdesk adapters rollback" in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"arch": "qwen3"}, r"LoRA for a 'qwen3' model but the served base is 'llama'"),
        ({"shapes": {"q_proj": (64, 144)}}, r"layer 0 attn_q of shape 64->144 but the base's is 576->576"),
        ({"layers": 31}, r"adapts layer 30; the base has 30 layers"),
    ],
)
def test_an_adapter_for_another_base_is_refused(tmp_path, dims, kwargs, message):
    arch = kwargs.pop("arch", "llama")
    path = tmp_path / "adapter.gguf"
    write_gguf_lora(_state(**kwargs), path, arch=arch, alpha=8, rank=RANK, n_head=9, n_head_kv=3)
    with pytest.raises(AdapterError, match=message) as err:
        check_gguf_lora(path, arch="llama", dims=dims)
    assert str(path) in str(err.value)


def test_metadata_of_another_base_is_refused(tmp_path):
    vdir = _version_dir(tmp_path / "v1", sha="other-sha-0123456789")
    with pytest.raises(AdapterError, match=r"trained on a base with sha256 other-sha-01") as err:
        check_version_dir(vdir, base_sha256="test-sha")
    assert str(vdir / "metadata.json") in str(err.value)


def test_a_gguf_that_is_not_a_lora_is_refused(tmp_path):
    from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

    model = write_tiny_qwen3_gguf(tmp_path / "adapter.gguf")  # a whole model renamed: a GGUF, but no LoRA
    with pytest.raises(AdapterError, match="is a GGUF but not a LoRA adapter") as err:
        check_gguf_lora(model)
    assert str(model) in str(err.value)


@pytest.mark.parametrize(
    ("config_change", "message"),
    [({"r": 8}, r"rank 4 but adapter_config.json says r=8"), ({"peft_type": "IA3"}, "not a PEFT LoRA config")],
)
def test_peft_config_that_does_not_match_is_refused(tmp_path, config_change, message):
    vdir = _version_dir(tmp_path / "v1")
    config = json.loads((vdir / "adapter_config.json").read_text()) | config_change
    (vdir / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(AdapterError, match=message):
        check_peft_dir(vdir)


def test_a_pickle_is_never_unpickled_whatever_its_name(tmp_path, dims):
    import torch

    # Control: this payload really does create its marker when unpickled, so its absence below means something.
    control = tmp_path / "control-marker"
    pickle.loads(pickle.dumps(_Marker(control)))
    assert control.is_dir()

    marker = tmp_path / "MARKER"
    payload = pickle.dumps(_Marker(marker))
    vdir = _version_dir(tmp_path / "v1")
    (vdir / "adapter.gguf").write_bytes(payload)
    with pytest.raises(AdapterError, match="is not a GGUF file"):
        check_gguf_lora(vdir / "adapter.gguf", arch="llama", dims=dims)
    (vdir / "adapter_model.safetensors").write_bytes(payload)
    with pytest.raises(AdapterError, match="is not a safetensors file"):
        load_peft_adapter(vdir, fix="")
    # A torch pickle as adapter_model.bin with no safetensors: PeftModel.from_pretrained would torch.load it.
    (vdir / "adapter_model.safetensors").unlink()
    torch.save({"w": _Marker(marker)}, vdir / "adapter_model.bin")
    with pytest.raises(AdapterError, match=r"is a pickle and adapter_model\.safetensors is missing") as err:
        load_peft_adapter(vdir, fix="")
    assert str(vdir / "adapter_model.bin") in str(err.value)
    assert not marker.exists()


def _add_row(store, vdir, n, sha="test-sha"):
    add_version_row(store, vdir, n, sha=sha)


def test_the_chat_refuses_a_damaged_version_before_llama_cpp_sees_it(engine, store, tmp_path):
    switch = AdapterSwitch(engine, store)
    good = _version_dir(tmp_path / "v1")
    bad = _version_dir(tmp_path / "v2", seed=1)
    _truncate(bad / "adapter.gguf")
    _add_row(store, good, 1)
    _add_row(store, bad, 2)
    try:
        switch.activate(1)
        with pytest.raises(AdapterError, match="is damaged or truncated") as err:
            switch.activate(2)
        assert str(bad / "adapter.gguf") in str(err.value)
        assert engine.adapter_version == 1
        # Engine.load_adapter checks shapes against the served model itself, whoever calls it.
        foreign = tmp_path / "foreign.gguf"
        write_gguf_lora(_state(shapes={"q_proj": (64, 128)}), foreign, arch="llama", alpha=8, rank=RANK, n_head=1,
                        n_head_kv=1)  # fmt: skip
        with pytest.raises(AdapterError, match="trained for another base"):
            engine.load_adapter(foreign, 3)
        assert engine.adapter_version == 1
    finally:
        engine.clear_adapter()


@pytest.mark.parametrize("fmt", ["peft", "gguf"])
def test_export_refuses_a_damaged_version_naming_the_file(store, tmp_path, fmt):
    from clawdesk.export import export_adapter

    vdir = _version_dir(tmp_path / "v1")
    _add_row(store, vdir, 1)
    assert export_adapter(store, fmt, tmp_path / "ok", n=1).is_dir()  # intact: exported
    damaged = vdir / ("adapter_model.safetensors" if fmt == "peft" else "adapter.gguf")
    _truncate(damaged)
    with pytest.raises(AdapterError, match="Export another version") as err:
        export_adapter(store, fmt, tmp_path / "bad", n=1)
    assert str(damaged) in str(err.value)
    assert not (tmp_path / "bad").exists()  # refused before anything was written


# -- training continues from a parent version: real torch/peft on a tiny Qwen3 --------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from clawdesk.config import TrainConfig
    from clawdesk.learn.base_model import load_base
    from clawdesk.learn.learner import Learner
    from clawdesk.learn.versions import write_adapter
    from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

    root = tmp_path_factory.mktemp("tiny")
    gguf = write_tiny_qwen3_gguf(root / "tiny-qwen3.gguf")
    model, info = load_base(gguf, device="cpu", load_in_4bit=False)
    learner = Learner(model, info, TrainConfig(lora_r=4, lora_alpha=8), parent_dir=None, gradient_checkpointing=False)
    with __import__("torch").no_grad():
        for p in learner.params:
            p.normal_(0, 0.1)  # a LoRA B of zeros could not tell a loaded parent from a fresh one
    parent = root / "v1"
    parent.mkdir()
    write_adapter(learner.model, parent, arch=info.arch, n_head=info.n_head, n_head_kv=info.n_head_kv)
    weights = {n: p.detach().clone() for n, p in learner.model.named_parameters() if "lora_" in n}
    return {"gguf": gguf, "parent": parent, "weights": weights, "root": root}


def _continue(tiny, parent_dir):
    from clawdesk.config import TrainConfig
    from clawdesk.learn.base_model import load_base
    from clawdesk.learn.learner import Learner

    model, info = load_base(tiny["gguf"], device="cpu", load_in_4bit=False)
    return Learner(model, info, TrainConfig(), parent_dir=parent_dir, gradient_checkpointing=False)


def test_training_continues_from_a_good_parent_exactly(tiny):
    from clawdesk.gguf.lora import read_gguf_lora_info

    dims = BaseDims.from_metadata(
        {"general.architecture": "qwen3"} | _tiny_meta(tiny["gguf"])
    )  # the PEFT files real peft wrote fit the tiny base's dims
    assert check_peft_dir(tiny["parent"], dims=dims)["rank"] == 4
    assert read_gguf_lora_info(tiny["parent"] / "adapter.gguf")["rank"] == 4
    learner = _continue(tiny, tiny["parent"])
    loaded = {n: p for n, p in learner.model.named_parameters() if "lora_" in n}
    assert loaded.keys() == tiny["weights"].keys()
    assert all(bool((loaded[n] == w).all()) for n, w in tiny["weights"].items())
    assert all(p.requires_grad for p in loaded.values())


def _tiny_meta(path):
    import gguf

    reader = gguf.GGUFReader(path)
    return {k: f.contents() for k, f in reader.fields.items() if k.startswith("qwen3.")}


def test_training_refuses_a_damaged_or_pickled_parent(tiny, tmp_path):
    import torch

    marker = tmp_path / "MARKER"
    truncated = shutil.copytree(tiny["parent"], tmp_path / "truncated")
    _truncate(truncated / "adapter_model.safetensors")
    pickled = shutil.copytree(tiny["parent"], tmp_path / "pickled")
    (pickled / "adapter_model.safetensors").unlink()
    torch.save({"w": _Marker(marker)}, pickled / "adapter_model.bin")
    foreign = shutil.copytree(tiny["parent"], tmp_path / "foreign")
    save_file(_state(r=4), str(foreign / "adapter_model.safetensors"))  # SmolLM2-shaped weights

    for parent, message in [
        (truncated, "is damaged or truncated"),
        (pickled, "is a pickle"),
        (foreign, "does not fit this base|of shape"),
    ]:
        with pytest.raises(AdapterError, match=message) as err:
            _continue(tiny, parent)
        assert str(parent) in str(err.value) and "clawdesk adapters rollback" in str(err.value)
    assert not marker.exists()
