"""``clawdesk doctor`` on real data dirs: the bundled demo model, real SQLite files, real adapter files."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from safetensors.numpy import save_file

from clawdesk.cli import main
from clawdesk.doctor import read_gguf_header
from clawdesk.gguf.lora import write_gguf_lora
from clawdesk.models import file_sha256
from clawdesk.runtime import model_sha256, open_store
from clawdesk.store import now_iso

SHAPES = {"q_proj": (576, 576), "v_proj": (576, 192), "down_proj": (1536, 576)}  # SmolLM2-135M's in -> out
NAMES = ["llama.cpp", "torch", "bitsandbytes", "data dir", "database", "model", "adapters", "disk", "memory"]


def _doctor(capsys, *args: str) -> tuple[int, str]:
    code = main(["doctor", *args])
    return code, capsys.readouterr().out


def _lines(out: str) -> dict[str, str]:
    """check name -> its status word, from the one-line-per-check output."""
    found = {}
    for line in out.splitlines():
        for name in sorted(NAMES + [n for n in [line[6:].split("  ")[0].strip()] if n.startswith("adapter v")]):
            if line[6:].startswith(name + " ") and line[:5].strip() in ("ok", "warn", "FAIL"):
                found[name] = line[:5].strip()
    return found


def _version_dir(path, sha: str):
    """An adapter version for SmolLM2 laid out as the trainer writes it: GGUF LoRA, PEFT safetensors, metadata."""
    rng = np.random.default_rng(0)
    state = {}
    for i in range(2):
        for name, (d_in, d_out) in SHAPES.items():
            key = f"base_model.model.model.layers.{i}.{'mlp' if name == 'down_proj' else 'self_attn'}.{name}"
            state[f"{key}.lora_A.weight"] = rng.normal(0, 0.05, (4, d_in)).astype(np.float32)
            state[f"{key}.lora_B.weight"] = rng.normal(0, 0.05, (d_out, 4)).astype(np.float32)
    path.mkdir(parents=True)
    write_gguf_lora(state, path / "adapter.gguf", arch="llama", alpha=8, rank=4, n_head=9, n_head_kv=3)
    save_file(state, str(path / "adapter_model.safetensors"))
    config = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": sorted(SHAPES)}
    (path / "adapter_config.json").write_text(json.dumps(config))
    (path / "metadata.json").write_text(json.dumps({"version": 1, "base": {"sha256": sha, "arch": "llama"}}))
    return path


@pytest.fixture
def healthy(config, demo_gguf, tmp_path):
    """A data dir that has been used: DB with the model's sha cached, one ready adapter version on disk."""
    store = open_store(config)
    sha = model_sha256(store, demo_gguf)
    vdir = _version_dir(config.adapters_dir / "v1", sha=sha)
    with store.transaction():
        store.db.execute(
            "INSERT INTO adapters(version, status, base_name, base_sha256, path, n_samples, metrics, validation, note,"
            " created_at) VALUES (1, 'ready', 'smollm2-135m', ?, ?, 1, '{}', '{}', '', ?)",
            [sha, str(vdir), now_iso()],
        )
    store.set_setting("active_adapter", 1)
    store.close()
    return vdir


def _snapshot(root):
    files = list(root.rglob("*"))
    return sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)


def test_healthy_data_dir_passes_every_check_and_changes_nothing(capsys, home, healthy):
    before = _snapshot(home)
    code, out = _doctor(capsys)
    assert code == 0, out
    status = _lines(out)
    assert {*NAMES, "adapter v1"} <= set(status), out
    assert "FAIL" not in status.values()
    assert "sha256 cached" in out and "rank 4, 12 GGUF tensors, for the served model" in out
    assert "serving v1" in out
    assert _snapshot(home) == before


def test_missing_data_dir_is_not_created(capsys, home):
    code, out = _doctor(capsys)
    assert code == 0, out
    assert "not created yet" in out and not home.exists()


def test_corrupted_database_fails_naming_it_with_a_fix(capsys, home, config, healthy):
    db = config.db_path
    data = bytearray(db.read_bytes())
    page = 4096
    data[page : 3 * page] = os.urandom(2 * page)  # wreck the b-tree pages after the header
    db.write_bytes(bytes(data))
    for side in ("-wal", "-shm"):
        db.with_name(db.name + side).unlink(missing_ok=True)
    code, out = _doctor(capsys)
    assert code == 1
    fail = next(line for line in out.splitlines() if line.startswith("FAIL") and "database" in line)
    assert str(db) in fail
    assert f"fix: Move it aside (`mv {db} {db}.bad`)" in out


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_deleted_or_truncated_adapter_file_fails_naming_it(capsys, healthy, damage):
    path = healthy / "adapter.gguf"
    if damage == "delete":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:5000])
    code, out = _doctor(capsys)
    assert code == 1
    assert _lines(out)["adapter v1"] == "FAIL"
    fail = next(line for line in out.splitlines() if line.startswith("FAIL"))
    assert str(path) in fail and ("missing" if damage == "delete" else "truncated") in fail
    assert "fix: `clawdesk adapters rollback`" in out


def test_missing_model_file_fails_naming_it(capsys, home, tmp_path):
    missing = tmp_path / "gone.gguf"
    code, out = _doctor(capsys, "--model", str(missing))
    assert code == 1
    assert _lines(out)["model"] == "FAIL"
    assert f"model file not found: {missing}" in out and "fix: `clawdesk pull`" in out


def test_truncated_model_file_fails(capsys, home, demo_gguf, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(demo_gguf.read_bytes()[: 40 << 20])
    code, out = _doctor(capsys, "--model", str(cut))
    assert code == 1 and f"{cut} is truncated" in out


def test_open_data_dir_permissions_fail(capsys, home, healthy):
    home.chmod(0o755)
    code, out = _doctor(capsys)
    assert code == 1 and f"fix: chmod 700 {home}" in out


def test_json_output_parses(capsys, home, healthy):
    code, out = _doctor(capsys, "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] is True
    assert [c["name"] for c in report["checks"]][: len(NAMES) - 3] == NAMES[:6]
    assert {c["status"] for c in report["checks"]} <= {"ok", "warn", "fail"}
    (healthy / "adapter.gguf").unlink()
    code, out = _doctor(capsys, "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    bad = [c for c in report["checks"] if c["status"] == "fail"]
    assert [c["name"] for c in bad] == ["adapter v1"] and bad[0]["fix"]


def test_header_reader_counts_parameters_like_the_gguf_library(tmp_path):
    import gguf

    from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

    path = write_tiny_qwen3_gguf(tmp_path / "tiny.gguf")
    meta, n_params = read_gguf_header(path)
    reader = gguf.GGUFReader(path)
    assert n_params == sum(int(t.n_elements) for t in reader.tensors) > 0
    assert meta["general.architecture"] == "qwen3" and meta["qwen3.block_count"] == 2
    assert file_sha256(path)  # the file is intact: no exception from the reader
