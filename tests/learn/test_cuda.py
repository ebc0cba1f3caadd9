"""The CUDA training path on a real GPU: 4-bit load + a step, the fp32 log-prob head, out-of-memory.

Every test skips where torch sees no CUDA device (CI, the 2-core dev machine): the GPU path is untested
there, and tests/learn/test_train_device.py covers what the CPU can. ``bench/gpu_check.sh`` runs these too.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import torch

from clawdesk.config import TrainConfig
from clawdesk.errors import TrainError
from clawdesk.learn import versions
from clawdesk.learn.base_model import load_base, resolve_device
from clawdesk.learn.learner import Learner
from clawdesk.learn.logprobs import reply_logprobs
from clawdesk.learn.samples import Sample
from clawdesk.learn.trainer import train
from clawdesk.testing.lora_check import llama_cpp_vs_peft
from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none)")

VOCAB = 283


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_qwen3_gguf(tmp_path_factory.mktemp("tiny") / "tiny-qwen3.gguf")


def _samples(n: int, seed: int) -> list[Sample]:
    rng = random.Random(seed)
    return [
        Sample(turn_id=i, prompt_ids=[rng.randrange(VOCAB) for _ in range(12)],
               reply_ids=[rng.randrange(VOCAB) for _ in range(6 + i)], reward=1.0, hint=None, teacher_prompt_ids=None)
        for i in range(n)
    ]  # fmt: skip


def test_auto_loads_nf4_on_the_gpu_and_a_step_trains_the_lora(tiny_gguf, tmp_path):
    import bitsandbytes as bnb

    model, info = load_base(tiny_gguf)  # "auto": the GPU, 4-bit, bf16 (fp16 without native bf16)
    want_dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    assert info.device == "cuda" and info.quantized and info.dtype == want_dtype
    down = model.model.layers[0].mlp.down_proj
    assert isinstance(down, bnb.nn.Linear4bit) and down.weight.device.type == "cuda"
    learner = Learner(model, info, TrainConfig(lr=0.02, epochs=1), parent_dir=None)
    samples = _samples(4, seed=1)
    before = learner.mean_logprob(samples)["mean"]
    torch.cuda.reset_peak_memory_stats()
    metrics = learner.step(samples, *learner.score(samples), stop=lambda: False)
    print(f"\nstep {metrics['seconds']:.3f} s, peak VRAM {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")
    assert metrics["loss"] == metrics["loss"] and metrics["grad_norm"] > 0
    assert learner.mean_logprob(samples)["mean"] > before
    versions.write_adapter(learner.model, tmp_path, arch=info.arch, n_head=info.n_head, n_head_kv=info.n_head_kv)
    check = llama_cpp_vs_peft(tiny_gguf, tmp_path)  # the adapter trained on the GPU, served by llama.cpp
    assert check["passed"], check


def test_the_fp32_head_on_the_gpu_matches_an_fp64_head(tmp_path):
    gguf = write_tiny_qwen3_gguf(tmp_path / "tiny.gguf", embed_std=0.5)  # logits of a real model's size
    model, _ = load_base(gguf, device="cuda", load_in_4bit=False)
    gen = torch.Generator().manual_seed(0)
    pairs = [
        (torch.randint(0, VOCAB, (p,), generator=gen).tolist(), torch.randint(0, VOCAB, (r,), generator=gen).tolist())
        for p, r in [(9, 12), (20, 30)]
    ]
    with torch.no_grad():
        logp, mask = reply_logprobs(model, pairs, "cuda")
        B, L, T = 2, 50, 30
        ids = torch.zeros((B, L), dtype=torch.long)
        attn = torch.zeros((B, L), dtype=torch.long)
        for b, (p, r) in enumerate(pairs):
            ids[b, L - len(p) - len(r) :], attn[b, L - len(p) - len(r) :] = torch.tensor([*p, *r]), 1
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        ids, attn, pos = ids.cuda(), attn.cuda(), pos.cuda()
        hidden = model.model(input_ids=ids, attention_mask=attn, position_ids=pos).last_hidden_state
        full = torch.log_softmax(hidden[:, -T - 1 : -1].double() @ model.lm_head.weight.double().T, -1)
        exact = full.gather(-1, ids[:, -T:, None]).squeeze(-1)
    assert model.dtype in (torch.bfloat16, torch.float16) and logp.dtype == torch.float32
    assert float((logp - exact)[mask].abs().max()) < 1e-4


def test_a_real_gpu_out_of_memory_becomes_the_train_error(tiny_gguf, tmp_path, monkeypatch):
    from clawdesk.store import NewTurn, Store, now_iso
    from clawdesk.store.judgments import Judgment, save_judgment

    db = tmp_path / "clawdesk.db"
    store = Store.open(db)
    try:
        session = store.create_session(system_prompt="sys")
        for i, sample in enumerate(_samples(2, seed=2)):
            at = now_iso()
            tid = store.add_turn(
                session.id,
                NewTurn(
                    user_content=f"q{i}", reply_content="a", reply_thinking="", status="finished", thinking=False,
                    model_name="tiny", model_path="/tiny.gguf", model_sha256="sha", prompt_ids=sample.prompt_ids,
                    reply_ids=sample.reply_ids, started_at=at, finished_at=at,
                ),
            )  # fmt: skip
            save_judgment(
                store,
                Judgment(
                    turn_id=tid, next_turn_id=tid, prompt_version="t", judge_model_name="j", judge_model_sha256="j",
                    score_outputs=[], votes=[], reward=1, hint_outputs=[], hint=None, enhanced_user=None,
                    enhanced_prompt_ids=None, seconds=0.0,
                ),
            )  # fmt: skip
    finally:
        store.close()

    def too_big(*_args, **_kwargs):
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")  # 1 PiB: a real torch.OutOfMemoryError

    monkeypatch.setattr(Learner, "score", too_big)
    with pytest.raises(TrainError) as info:
        train(db, tmp_path / "adapters", tiny_gguf, "tiny", "sha", TrainConfig(batch_size=2, device="cuda"))
    message = str(info.value)
    assert message.startswith("Out of memory on cuda while scoring the batch")
    assert "close other programs using the GPU" in message and 'train.device = "cpu"' in message


def test_a_gpu_index_that_does_not_exist_is_refused():
    with pytest.raises(TrainError, match=re.escape("fix train.device")):
        resolve_device(f"cuda:{torch.cuda.device_count()}")
