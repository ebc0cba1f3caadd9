"""The learner on real models: tiny random Qwen3 GGUF (fast) and the bundled SmolLM2 (slow).

Everything is real: SQLite log, transformers + peft on CPU, the GGUF LoRA loaded by llama.cpp.
"""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from clawdesk.config import TrainConfig
from clawdesk.errors import TrainError
from clawdesk.gguf.lora import read_gguf_lora_info
from clawdesk.learn import versions
from clawdesk.learn.base_model import load_base
from clawdesk.learn.learner import Learner
from clawdesk.learn.logprobs import micro_batches, reply_logprobs
from clawdesk.learn.protocol import TrainerFailed, TrainerStarted, TrainProgress, decode
from clawdesk.learn.samples import Sample, count_ready, ready_samples
from clawdesk.learn.trainer import train
from clawdesk.store import NewTurn, Store, now_iso
from clawdesk.store.judgments import Judgment, save_judgment
from clawdesk.testing.judged_log import fill_judged
from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

SHA = "tiny-sha"
VOCAB = 283  # the tiny Qwen3's vocabulary


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_qwen3_gguf(tmp_path_factory.mktemp("tiny") / "tiny-qwen3.gguf")


@pytest.fixture
def home(tmp_path) -> dict[str, Path]:
    return {"db": tmp_path / "clawdesk.db", "adapters": tmp_path / "adapters"}


def fill(db: Path, n: int, *, seed: int, sha: str = SHA, rewards=(1, -1), hint_every: int = 0, vocab: int = VOCAB):
    """Add ``n`` judged turns with random token ids (< vocab); every ``hint_every``-th gets a hint."""
    return fill_judged(db, n, seed=seed, vocab=vocab, sha=sha, rewards=rewards, hint_every=hint_every)


def run(home, gguf, config: TrainConfig, **kw) -> tuple[list[int], list[TrainProgress]]:
    seen: list[TrainProgress] = []
    config = dataclasses.replace(config, device="cpu", load_in_4bit=False)  # the same run on a CUDA box
    made = train(home["db"], home["adapters"], gguf, "tiny", SHA, config, on_progress=seen.append, **kw)
    return made, seen


def lora_tensors(peft_model, kind: str) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in peft_model.named_parameters() if f"lora_{kind}" in n}


def test_micro_batches_keep_padded_size_within_budget():
    lengths = [10, 300, 40, 40, 90, 5, 64]
    groups = micro_batches(lengths, 128)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        assert len(g) == 1 or len(g) * max(lengths[i] for i in g) <= 128
    assert [1] in groups  # longer than the budget: alone
    assert micro_batches([3, 3, 3], 1000) == [[0, 1, 2]]


def test_left_padded_batch_gives_each_reply_its_unpadded_logprobs(tiny_gguf):
    model, _ = load_base(tiny_gguf, device="cpu", load_in_4bit=False)
    g = torch.Generator().manual_seed(0)
    shapes = [(5, 3), (30, 12), (1, 1), (17, 20)]
    pairs = [(torch.randint(0, VOCAB, (p,), generator=g).tolist(), torch.randint(0, VOCAB, (r,), generator=g).tolist())
             for p, r in shapes]  # fmt: skip
    with torch.no_grad():
        logp, mask = reply_logprobs(model, pairs, "cpu")  # (4, 20)
        assert logp.shape == mask.shape == (4, 20)
        for b, (p, r) in enumerate(pairs):
            full = torch.log_softmax(model(input_ids=torch.tensor([p + r])).logits[0], -1)  # (L, V)
            expected = full[len(p) - 1 : -1].gather(-1, torch.tensor(r)[:, None]).squeeze(-1)  # (len(r),)
            assert int(mask[b].sum()) == len(r)
            torch.testing.assert_close(logp[b][mask[b]], expected, atol=1e-5, rtol=0)


def _samples(n: int, reward: float, seed: int, hint: bool = False) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt = [rng.randrange(VOCAB) for _ in range(12)]
        out.append(
            Sample(
                turn_id=i, prompt_ids=prompt, reply_ids=[rng.randrange(VOCAB) for _ in range(6 + i)], reward=reward,
                hint="h" if hint else None, teacher_prompt_ids=[*prompt, 7, 8] if hint else None,
            )
        )  # fmt: skip
    return out


@pytest.mark.parametrize("reward", [1.0, -1.0])
def test_a_step_moves_the_lora_not_the_base_and_follows_the_reward(tiny_gguf, reward):
    model, info = load_base(tiny_gguf, device="cpu", load_in_4bit=False)
    base_q = model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    base_embed = model.model.embed_tokens.weight.detach().clone()
    learner = Learner(model, info, TrainConfig(lr=1e-3, epochs=1, token_budget=64), parent_dir=None)  # one pass
    samples = _samples(4, reward, seed=1)
    a_before = lora_tensors(learner.model, "A")
    assert all(float(b.abs().max()) == 0.0 for b in lora_tensors(learner.model, "B").values())  # fresh LoRA
    before = learner.mean_logprob(samples)["mean"]
    ref, teacher = learner.score(samples)
    metrics = learner.step(samples, ref, teacher, stop=lambda: False)

    assert metrics["n_micro_batches"] > 1  # 4 × ~20 tokens do not fit a 64-token budget: accumulation ran
    assert metrics["n_samples"] == 4 and metrics["reward_mean"] == reward and metrics["tokens_per_s"] > 0
    assert metrics["clip_frac"] == 0.0 and metrics["ratio_mean"] == pytest.approx(1.0)  # first step: old = current
    assert torch.equal(model.model.layers[0].self_attn.q_proj.base_layer.weight, base_q)
    assert torch.equal(model.model.embed_tokens.weight, base_embed)
    assert all(float(b.abs().max()) > 0 for b in lora_tensors(learner.model, "B").values())
    assert all(torch.equal(a, a_before[n]) for n, a in lora_tensors(learner.model, "A").items())  # B was 0: no grad
    after = learner.mean_logprob(samples)["mean"]
    assert (after - before) * reward > 0  # rewarded replies became likelier, punished ones less likely


def test_later_epochs_see_the_ratio_move_and_clip(tiny_gguf):
    """With epochs > 1 the old log-probs stay frozen at the first pass, so later passes have ratio ≠ 1."""
    model, info = load_base(tiny_gguf, device="cpu", load_in_4bit=False)
    learner = Learner(model, info, TrainConfig(lr=5e-2, epochs=4, eps=0.01, eps_high=0.01), parent_dir=None)
    samples = _samples(4, 1.0, seed=2)
    before = learner.mean_logprob(samples)["mean"]
    metrics = learner.step(samples, *learner.score(samples), stop=lambda: False)
    assert metrics["epochs"] == 4.0
    assert metrics["ratio_mean"] != pytest.approx(1.0, abs=1e-4)  # the policy moved away from the frozen old one
    assert metrics["clip_frac"] > 0.0  # and the PPO clip now acts
    assert learner.mean_logprob(samples)["mean"] > before


def test_hinted_sample_moves_towards_the_teacher(tiny_gguf):
    model, info = load_base(tiny_gguf, device="cpu", load_in_4bit=False)
    learner = Learner(model, info, TrainConfig(lr=1e-3, beta_kl=0.0), parent_dir=None)
    samples = _samples(3, 0.0, seed=2, hint=True)  # no reward: the OPD term is the only signal
    ref, teacher = learner.score(samples)
    gap_before = sum(float((t - r).abs().sum()) for t, r in zip(teacher, learner.logprobs_each(
        [(s.prompt_ids, s.reply_ids) for s in samples]), strict=True))  # fmt: skip
    metrics = learner.step(samples, ref, teacher, stop=lambda: False)
    assert metrics["n_hinted"] == 3 and metrics["opd_adv_mean"] != 0.0
    now = learner.logprobs_each([(s.prompt_ids, s.reply_ids) for s in samples])
    gap_after = sum(float((t - n).abs().sum()) for t, n in zip(teacher, now, strict=True))
    assert gap_after < gap_before


def test_qlora_nf4_base_trains_on_cpu(tiny_gguf, tmp_path):
    import bitsandbytes as bnb

    model, info = load_base(tiny_gguf, device="cpu", load_in_4bit=True)
    assert info.quantized and isinstance(model.model.layers[0].mlp.down_proj, bnb.nn.Linear4bit)
    learner = Learner(model, info, TrainConfig(lr=1e-3), parent_dir=None)
    samples = _samples(2, 1.0, seed=3)
    metrics = learner.step(samples, *learner.score(samples), stop=lambda: False)
    assert metrics["loss"] == metrics["loss"]  # not nan
    assert all(float(b.abs().max()) > 0 for b in lora_tensors(learner.model, "B").values())
    lora = versions.write_adapter(learner.model, tmp_path, arch=info.arch, n_head=info.n_head, n_head_kv=info.n_head_kv)
    assert lora["r"] == 16 and read_gguf_lora_info(tmp_path / versions.ADAPTER_GGUF)["rank"] == 16


def test_validation_fails_an_adapter_that_llama_cpp_cannot_load(tiny_gguf, tmp_path):
    model, info = load_base(tiny_gguf, device="cpu", load_in_4bit=False)
    learner = Learner(model, info, TrainConfig(), parent_dir=None)
    versions.write_adapter(learner.model, tmp_path, arch=info.arch, n_head=info.n_head, n_head_kv=info.n_head_kv)
    other = write_tiny_qwen3_gguf(tmp_path / "narrower.gguf", hidden=32)  # same arch, other shapes
    fine = {"mean": -5.0, "n_tokens": 10, "finite": True}
    args = {"heldout_ids": [1], "before": fine, "after": fine, "max_drop": 1.0}
    ok = versions.validate(tiny_gguf, tmp_path / versions.ADAPTER_GGUF, [1, 2, 3], **args)
    assert ok["passed"] and ok["llama_cpp"]["loads"] and ok["llama_cpp"]["finite"]
    bad = versions.validate(other, tmp_path / versions.ADAPTER_GGUF, [1, 2, 3], **args)
    assert not bad["passed"] and not bad["llama_cpp"]["loads"] and "llama.cpp" in bad["problems"]
    nan = versions.validate(
        tiny_gguf, tmp_path / versions.ADAPTER_GGUF, [1], **(args | {"after": fine | {"mean": float("nan")}})
    )
    assert not nan["passed"] and "held-out" in nan["problems"]


def test_too_few_samples_skips_without_loading(tiny_gguf, home):
    fill(home["db"], 3, seed=0)
    made, seen = run(home, tiny_gguf, TrainConfig(batch_size=4))
    assert made == []
    assert [p.phase for p in seen] == ["skipped"]
    assert "3 of 4" in seen[0].message and seen[0].metrics["ready"] == 3.0
    assert not home["adapters"].exists()


def test_train_writes_v1_then_v2_continues_from_it(tiny_gguf, home):
    from peft import PeftModel

    fill(home["db"], 6, seed=10, rewards=(0,))  # earlier replies: no signal, held out for validation
    first = fill(home["db"], 4, seed=11, hint_every=2)
    made, seen = run(home, tiny_gguf, TrainConfig(batch_size=4))
    assert made == [1]
    phases = [p.phase for p in seen]
    assert phases[0] == "loading" and phases[-1] == "done"
    assert {"scoring", "step", "writing", "validating"} <= set(phases)
    step_metrics = next(p.metrics for p in seen if p.phase == "step" and p.metrics)
    assert {"loss", "reward_mean", "clip_frac", "tokens_per_s", "kl", "grad_norm"} <= set(step_metrics)

    store = Store.open(home["db"])
    try:
        v1 = versions.get_version(store, 1)
        assert v1.ready and v1.parent_version is None and v1.n_samples == 4
        assert v1.path == home["adapters"] / "v1"
        assert [s["turn_id"] for s in versions.version_samples(store, 1)] == first
        assert count_ready(store, SHA) == 0
        assert v1.validation["llama_cpp"]["loads"] and v1.validation["llama_cpp"]["finite"]
        held = v1.validation["heldout"]
        assert len(held["turn_ids"]) == 6 and not set(held["turn_ids"]) & set(first)
        assert held["drop"] <= TrainConfig().max_logprob_drop
        meta = json.loads((v1.path / "metadata.json").read_text())
        assert meta["base"]["name"] == "tiny" and meta["base"]["sha256"] == SHA
        assert [s["turn_id"] for s in meta["samples"]] == first
        assert [s["hint"] is not None for s in meta["samples"]] == [True, False, True, False]
        assert meta["metrics"]["loss"] == v1.metrics["loss"] and meta["validation"]["passed"] is True
        assert meta["created_at"] == v1.created_at
        assert sorted(p.name for p in home["adapters"].iterdir() if not p.name.startswith(".")) == ["v1"]
        info = read_gguf_lora_info(v1.gguf_path)
        assert (info["arch"], info["rank"], info["alpha"]) == ("qwen3", 16, 32.0)

        loaded = PeftModel.from_pretrained(load_base(tiny_gguf, device="cpu", load_in_4bit=False)[0], str(v1.peft_dir))
        a1 = lora_tensors(loaded, "A")
        assert all(float(b.abs().max()) > 0 for b in lora_tensors(loaded, "B").values())

        fill(home["db"], 4, seed=12)
        made, _ = run(home, tiny_gguf, TrainConfig(batch_size=4))
        assert made == [2]
        v2 = versions.get_version(store, 2)
        assert v2.ready and v2.parent_version == 1
        assert versions.latest_ready(store, SHA).version == 2
        a2 = lora_tensors(
            PeftModel.from_pretrained(load_base(tiny_gguf, device="cpu", load_in_4bit=False)[0], str(v2.peft_dir)), "A"
        )
        # Continued, not re-initialised: a fresh LoRA would draw new random A matrices.
        assert a1.keys() == a2.keys()
        assert (
            max(float((a2[n] - a1[n]).abs().max()) for n in a1) < 1e-2 < min(float(a.abs().max()) for a in a1.values())
        )
    finally:
        store.close()


def test_a_damaged_newest_version_is_skipped_as_the_parent(tiny_gguf, home):
    """Learning does not stop for good when the newest version's files are damaged: v3 continues from v1."""
    for seed in (21, 22):
        fill(home["db"], 4, seed=seed)
        run(home, tiny_gguf, TrainConfig(batch_size=4))
    weights = home["adapters"] / "v2" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    fill(home["db"], 4, seed=23)
    made, seen = run(home, tiny_gguf, TrainConfig(batch_size=4))
    assert made == [3]
    assert any(p.message.startswith("not continuing from v2:") and str(weights) in p.message for p in seen)
    store = Store.open(home["db"])
    try:
        assert versions.get_version(store, 3).parent_version == 1
        assert versions.get_version(store, 2).status == "ready"  # still listed; the chat refuses to serve it
    finally:
        store.close()


def test_llama_cpp_serves_the_adapter_as_peft_computes_it(tiny_gguf, home):
    from clawdesk.testing.lora_check import llama_cpp_vs_peft  # the check bench/gpu_check.py runs too

    fill(home["db"], 4, seed=20)
    made, _ = run(home, tiny_gguf, TrainConfig(batch_size=4, lr=0.02, max_logprob_drop=50.0))
    check = llama_cpp_vs_peft(tiny_gguf, home["adapters"] / f"v{made[0]}")
    assert check["effect"] > 0.05  # the adapter really changes the output...
    assert check["gap"] < check["effect"] / 50  # ...and llama.cpp applies it as PEFT does
    assert check["passed"]


def test_collapsing_adapter_is_rejected_and_never_continued_from(tiny_gguf, home):
    used = fill(home["db"], 8, seed=30, rewards=(-1,))
    # The same prompts and replies again, unjudged: the held-out set. Punishing the replies must
    # lower their log-prob there, which a tolerance of 1e-9 nats cannot allow.
    fill(home["db"], 8, seed=30, rewards=(0,))
    made, seen = run(home, tiny_gguf, TrainConfig(batch_size=4, max_logprob_drop=1e-9))
    assert made == [1, 2]
    store = Store.open(home["db"])
    try:
        v1, v2 = (versions.get_version(store, n) for n in made)
        for v in (v1, v2):
            assert v.status == "rejected" and "held-out log-prob fell" in v.note
            assert v.validation["passed"] is False and v.validation["heldout"]["drop"] > 1e-9
            meta = json.loads((v.path / "metadata.json").read_text())
            assert meta["status"] == "rejected" and meta["note"] == v.note
            assert v.gguf_path.is_file()  # kept on disk for inspection
        # v2 went on from the weights before v1 (the base), not from v1.
        assert v2.parent_version is None
        assert v2.validation["heldout"]["logp_before"] == pytest.approx(
            v1.validation["heldout"]["logp_before"], abs=1e-6
        )
        assert versions.latest_ready(store, SHA) is None
        assert ready_samples(store, SHA) == []  # spent all the same
        assert sorted(s["turn_id"] for n in made for s in versions.version_samples(store, n)) == used
    finally:
        store.close()
    assert any(p.phase == "validating" and "rejected" in p.message for p in seen)


def test_stop_before_start_trains_nothing(tiny_gguf, home):
    fill(home["db"], 4, seed=40)
    stop = threading.Event()
    stop.set()
    made, seen = run(home, tiny_gguf, TrainConfig(batch_size=4), stop=stop)
    assert made == [] and seen[-1].phase == "done" and "stopped" in seen[-1].message
    store = Store.open(home["db"])
    try:
        assert count_ready(store, SHA) == 4 and versions.list_versions(store) == []
    finally:
        store.close()


def test_a_turn_with_token_ids_outside_the_vocabulary_is_named_and_nothing_is_recorded(tiny_gguf, home):
    """A turn served by another model (ids past the base's vocabulary) stops the run before any step."""
    good = fill(home["db"], 3, seed=45)
    [bad] = fill(home["db"], 1, seed=46, vocab=VOCAB * 1000)  # ~all its ids are far past VOCAB
    with pytest.raises(TrainError, match=rf"turn {bad} has token ids outside the base's vocabulary \({VOCAB}\)"):
        run(home, tiny_gguf, TrainConfig(batch_size=4))
    with Store.open(home["db"]) as store:
        assert versions.list_versions(store) == []
        assert sorted(s.turn_id for s in ready_samples(store, SHA)) == sorted([*good, bad])  # still ready
    assert not (home["adapters"] / "v1").exists()


def _trainer_cmd(home, gguf: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "clawdesk.learn.trainer", "--db", str(home["db"]), "--adapters", str(home["adapters"]),
        "--base", str(gguf), "--base-name", "tiny", "--base-sha", SHA, *extra,
    ]  # fmt: skip


def test_subprocess_prints_json_progress_lines(tiny_gguf, home, tmp_path):
    fill(home["db"], 3, seed=50)
    config_home = tmp_path / "cfg"
    config_home.mkdir()
    (config_home / "config.toml").write_text('[train]\nlora_r = 4\nlora_alpha = 8\nbatch_size = 16\ndevice = "cpu"\n')
    cmd = _trainer_cmd(home, tiny_gguf, "--batch-size", "1", "--steps", "2", "--config-home", str(config_home))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    # First: whether the app may pause it (Linux: the kernel continues it if the app dies).
    assert lines.pop(0) == {"phase": "starting", "pausable": sys.platform.startswith("linux")}
    assert all(set(line) == {"phase", "step", "steps", "message", "metrics"} for line in lines)
    assert lines[0]["phase"] == "loading" and lines[-1]["phase"] == "done"
    assert any(line["phase"] == "step" and "loss" in line["metrics"] for line in lines)
    assert {line["steps"] for line in lines} == {2}
    # The loop reads the same lines through the typed protocol.
    messages = [decode(line) for line in proc.stdout.splitlines()]
    assert messages[0] == TrainerStarted(sys.platform.startswith("linux"))
    assert all(isinstance(m, TrainProgress) for m in messages[1:]) and messages[-1].phase == "done"
    store = Store.open(home["db"])
    try:
        assert [v.version for v in versions.list_versions(store)] == [1, 2] and count_ready(store, SHA) == 1
        assert read_gguf_lora_info(versions.get_version(store, 2).gguf_path)["rank"] == 4  # config.toml was read
    finally:
        store.close()


def test_subprocess_reports_errors_as_json(home, tmp_path):
    fill(home["db"], 2, seed=60)
    proc = subprocess.run(
        _trainer_cmd(home, tmp_path / "missing.gguf", "--batch-size", "1"), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    assert line["phase"] == "error" and line["kind"] == "TrainError" and "missing.gguf" in line["error"]
    assert decode(proc.stdout.strip().splitlines()[-1]) == TrainerFailed(line["error"], "TrainError")


@pytest.mark.slow
def test_smollm2_real_replies_train_and_hot_swap(demo_gguf, engine, home):
    """The bundled SmolLM2 (llama arch: q/k rows permuted in GGUF), replies served by the real engine."""
    from peft import PeftModel

    from clawdesk.engine import SamplingParams

    store = Store.open(home["db"])
    try:
        session = store.create_session(system_prompt="You are a helpful assistant.")
        for k, (question, reward) in enumerate([("What is 2+2?", 1), ("Name a colour.", -1), ("Say hi.", 1)]):
            prompt = engine.build_prompt(session.system_prompt, [], question, thinking=False, reply_room=64)
            reply = engine.generate(prompt.token_ids, SamplingParams(temperature=0.0, max_tokens=24))
            at = now_iso()
            tid = store.add_turn(
                session.id,
                NewTurn(
                    user_content=question, reply_content=reply.content, reply_thinking="", status="finished",
                    thinking=False, model_name="smollm2", model_path=str(demo_gguf), model_sha256=SHA,
                    prompt_ids=reply.prompt_ids, reply_ids=reply.reply_ids, started_at=at, finished_at=at,
                ),
            )  # fmt: skip
            if k < 2:  # the third stays unjudged: a held-out reply
                save_judgment(
                    store,
                    Judgment(
                        turn_id=tid, next_turn_id=tid, prompt_version="t", judge_model_name="j",
                        judge_model_sha256="j", score_outputs=[], votes=[reward], reward=reward, hint_outputs=[],
                        hint=None, enhanced_user=None, enhanced_prompt_ids=None, seconds=0.0,
                    ),
                )  # fmt: skip
    finally:
        store.close()

    seen: list[TrainProgress] = []
    made = train(home["db"], home["adapters"], demo_gguf, "smollm2", SHA,
                 TrainConfig(batch_size=2, device="cpu", load_in_4bit=False), on_progress=seen.append)  # fmt: skip
    assert made == [1]
    store = Store.open(home["db"])
    try:
        v1 = versions.get_version(store, 1)
    finally:
        store.close()
    assert v1.ready, v1.note
    assert read_gguf_lora_info(v1.gguf_path)["arch"] == "llama"
    step = next(p.metrics for p in seen if p.phase == "step" and p.metrics)
    print(f"\nSmolLM2: {seen[1].message}; step {step['seconds']:.2f} s, {step['tokens_per_s']:.0f} tok/s; "
          f"validation {v1.validation['heldout']}")  # fmt: skip
    base, _ = load_base(demo_gguf, device="cpu", load_in_4bit=False)
    loaded = PeftModel.from_pretrained(base, str(v1.peft_dir))
    assert all(float(b.abs().max()) > 0 for b in lora_tensors(loaded, "B").values())
    engine.load_adapter(v1.gguf_path, 1)  # the chat's hot swap accepts it
    try:
        prompt = engine.build_prompt("You are a helpful assistant.", [], "Say hi.", thinking=False, reply_room=64)
        again = engine.generate(prompt.token_ids, SamplingParams(temperature=0.0, max_tokens=8))
        assert again.reply_ids and again.adapter_version == 1
    finally:
        engine.clear_adapter()
