"""Privacy (issue #7): owner-only files, no network outside `pull`, no conversation in adapter exports.

One module-scoped "world" does everything a person's data goes through, with a permissive umask
(0022) and the network blocked: a chat turn on the demo GGUF, the real channel judge, one training
step of a tiny Qwen3 LoRA (in-process), every export format, `export-data`, and a tiny
`clawdesk eval --judge-set`. The tests then read what it left on disk and what reached for a socket.
"""

from __future__ import annotations

import json
import os
import random
import socket
import stat
import sys
import urllib.request
from pathlib import Path

import pytest

from clawdesk.agent import AgentService
from clawdesk.cli import main
from clawdesk.config import ChatConfig, Config, JudgeConfig, TrainConfig
from clawdesk.export import FORMATS, export_adapter, export_data
from clawdesk.judge.runner import Judge
from clawdesk.judge.service import judge_pending
from clawdesk.learn.trainer import train
from clawdesk.private import open_private, private_dir
from clawdesk.runtime import open_store
from clawdesk.store import NewTurn, now_iso
from clawdesk.store.judgments import Judgment, save_judgment
from clawdesk.store.prefs import add_preference, list_preferences

# The world trains a tiny LoRA and runs the judge and an eval: ~30 s on 2 cores, shared by these tests.
slow_world = pytest.mark.slow

MARKER = "zq7-private-marker-41xk"  # appears in user messages, replies and hints, never in adapter exports
TINY_SHA, TINY_VOCAB = "tiny-sha", 283


class NetworkLog:
    """Blocks and records every attempt to resolve a name or connect an internet socket."""

    def __init__(self, mp: pytest.MonkeyPatch):
        self.attempts: list[str] = []
        real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

        def refuse(what: str):
            def blocked(*args, **kwargs):
                self.attempts.append(f"{what}{args[:2]!r}")
                raise OSError(f"network blocked by the privacy test: {what}")

            return blocked

        def guarded(real):
            def connect(sock, address):
                if isinstance(address, tuple):  # AF_INET/AF_INET6; a str is a local AF_UNIX path
                    return refuse("connect")(address)
                return real(sock, address)

            return connect

        mp.setattr(socket.socket, "connect", guarded(real_connect))
        mp.setattr(socket.socket, "connect_ex", guarded(real_connect_ex))
        mp.setattr(socket, "create_connection", refuse("create_connection"))
        mp.setattr(socket, "getaddrinfo", refuse("getaddrinfo"))
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
            mp.delenv(name, raising=False)  # so that a hub call would try the network and show up here
        if "huggingface_hub.constants" in sys.modules:  # read once at import: undo an earlier offline setting
            mp.setattr(sys.modules["huggingface_hub.constants"], "HF_HUB_OFFLINE", False)


def _fill(store, n: int) -> None:
    """``n`` judged turns of the tiny model (token ids < its vocab), each quoting the marker, half with a hint."""
    rng = random.Random(7)
    session = store.create_session(system_prompt=f"system {MARKER}")
    for i in range(n):
        prompt = [rng.randrange(TINY_VOCAB) for _ in range(12)]
        at = now_iso()
        tid = store.add_turn(
            session.id,
            NewTurn(
                user_content=f"question {i} {MARKER}", reply_content=f"answer {i} {MARKER}", reply_thinking="",
                status="finished", thinking=False, model_name="tiny", model_path="/tiny.gguf", model_sha256=TINY_SHA,
                prompt_ids=prompt, reply_ids=[rng.randrange(TINY_VOCAB) for _ in range(6)], started_at=at,
                finished_at=at,
            ),
        )  # fmt: skip
        hinted = i % 2 == 0
        save_judgment(
            store,
            Judgment(
                turn_id=tid, next_turn_id=tid, prompt_version="t", judge_model_name="j", judge_model_sha256="j",
                score_outputs=[], votes=[], reward=(1, -1)[i % 2], hint_outputs=[],
                hint=f"Please say {MARKER} less." if hinted else None, enhanced_user=None,
                enhanced_prompt_ids=[*prompt, 5, 6, 7] if hinted else None, seconds=0.0,
            ),
        )  # fmt: skip


@pytest.fixture(scope="module")
def world(tmp_path_factory, engine, demo_gguf):
    from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

    root = tmp_path_factory.mktemp("privacy")
    tiny = write_tiny_qwen3_gguf(root / "tiny-qwen3.gguf")
    mp = pytest.MonkeyPatch()
    old_umask = os.umask(0o022)  # the common default: without care, files come out world-readable
    try:
        network = NetworkLog(mp)
        mp.setenv("CLAWDESK_HOME", str(root / "eval-home"))
        config = Config(home=root / "home", chat=ChatConfig(temperature=0.0, max_reply_tokens=8))
        store = open_store(config)
        try:
            # chat: two turns on the demo engine, so the first is ready to judge
            service = AgentService(engine, config.chat)
            session = service.new_session(store)
            for text in (f"Tell me about {MARKER}.", "Thanks, that helps."):
                service.run_turn(store, session.id, text)
            # judge: the real (channel) judge on the demo engine
            summary = judge_pending(store, Judge(engine, JudgeConfig(votes=1)), max_age_hours=72)
            # the preference memory holds the marker too: it is the person's, never an export's
            add_preference(store, f"Please say {MARKER} less often.")
            n_prefs = len(list_preferences(store))
            # train: one step of the tiny Qwen3 LoRA, in-process
            _fill(store, 4)
            made = train(
                config.db_path, config.adapters_dir, tiny, "tiny", TINY_SHA,
                TrainConfig(batch_size=4, epochs=1, lora_r=2, lora_alpha=4, token_budget=256, device="cpu"), steps=1,
            )  # fmt: skip
            # export: every adapter format and the data
            exports = {fmt: export_adapter(store, fmt, root / "exports" / fmt, base_gguf=tiny) for fmt in FORMATS}
            data = root / "exports" / "data.jsonl"
            n_data = export_data(store, data)
            # The -wal/-shm files exist only while a connection is open (the last close removes them).
            db_modes = {p.name: _mode(p) for p in config.home.iterdir() if p.name.startswith("clawdesk.db")}
        finally:
            store.close()
        # eval: the cheapest real `clawdesk eval` (one judge-set case on the demo model)
        cases = root / "one.jsonl"
        case = {"id": "a", "category": "thanks", "request": "2+2?", "reply": "4", "next": "Thanks!", "label": 1}
        cases.write_text(json.dumps(case | {"next_role": "user", "directive": False}), encoding="utf-8")
        eval_code = main(["eval", "--judge-set", str(cases), "--model", str(demo_gguf), "--out", str(root / "eval")])
        # the control: the block is real (a connection attempt is refused and recorded)
        attempts = list(network.attempts)
        with pytest.raises(OSError):
            urllib.request.urlopen("http://127.0.0.1:9/", timeout=1)
        control = network.attempts[len(attempts) :]
    finally:
        os.umask(old_umask)
        mp.undo()
    return {
        "config": config, "attempts": attempts, "control": control, "summary": summary, "made": made,
        "exports": exports, "data": data, "n_data": n_data, "eval_code": eval_code, "db_modes": db_modes,
        "n_prefs": n_prefs,
    }  # fmt: skip


@slow_world
def test_chat_judge_train_export_and_eval_never_reach_for_the_network(world):
    assert world["summary"].judged == 1 and world["made"] == [1] and world["eval_code"] == 0
    assert world["control"], "the socket block did not see a deliberate connection attempt"
    assert world["attempts"] == []


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@slow_world
def test_data_dir_log_and_adapters_are_owner_only(world):
    config = world["config"]
    assert _mode(config.home) == 0o700
    assert world["db_modes"] == {"clawdesk.db": 0o600, "clawdesk.db-wal": 0o600, "clawdesk.db-shm": 0o600}
    version = config.adapters_dir / "v1"
    found = {p.name for p in version.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "adapter.gguf", "metadata.json"} <= found
    assert _mode(config.adapters_dir) == 0o700 and _mode(version) == 0o700
    for path in version.rglob("*"):
        assert _mode(path) == (0o700 if path.is_dir() else 0o600), path


@slow_world
def test_exports_are_not_world_readable(world):
    for fmt, out in world["exports"].items():
        assert _mode(out) == 0o700, fmt
        for path in out.iterdir():
            assert _mode(path) == 0o600, path
    assert _mode(world["data"]) == 0o600


@slow_world
def test_adapter_exports_never_carry_a_conversation(world):
    """Every byte of every adapter export, in every format, is free of the marker the turns and hints hold."""
    assert world["n_prefs"] == 1  # a preference item holds the marker as well
    learned = (world["config"].adapters_dir / "v1" / "metadata.json").read_text()
    assert MARKER in learned  # the private version records its hints; the export must not carry them
    for fmt, out in world["exports"].items():
        files = sorted(out.iterdir())
        assert len(files) >= 3, fmt
        for path in files:
            data = path.read_bytes()
            for form in (MARKER.encode(), MARKER.encode("utf-16-le"), MARKER.upper().encode()):
                assert form not in data, f"{path} holds a conversation"
        meta = json.loads((out / "metadata.json").read_text()) if (out / "metadata.json").exists() else {}
        assert all("wording" not in c for c in meta.get("validation", {}).get("memory", [])), fmt
    assert '"wording"' in learned  # the check's fingerprint of the item's words stays in the data dir
    # export-data is the one way out for conversations, and only when asked for
    assert world["n_data"] >= 4 and MARKER in world["data"].read_text()


def test_trainer_log_is_created_owner_only(tmp_path):
    """The TUI sends the trainer's stderr to logs/trainer.log through these two helpers."""
    old = os.umask(0)
    try:
        logs = private_dir(tmp_path / "home" / "logs")
        with open_private(logs / "trainer.log", "a") as fh:
            fh.write("line\n")
        existing = tmp_path / "old.log"
        existing.write_text("x")
        existing.chmod(0o644)
        with open_private(existing, "a") as fh:
            fh.write("y")
    finally:
        os.umask(old)
    assert _mode(logs) == 0o700 and _mode(logs / "trainer.log") == 0o600
    assert _mode(existing) == 0o600 and existing.read_text() == "xy"  # appended, and tightened


def test_the_learning_stack_is_imported_with_the_hub_offline_and_the_setting_restored():
    """bitsandbytes on an AVX512-BF16 CPU asked huggingface.co for kernels on import (found by the test above)."""
    import subprocess
    import sys

    script = """
import socket, sys
attempts = []
def refuse(*args, **kwargs):
    attempts.append(args[:1])
    raise OSError("blocked")
socket.create_connection = refuse
import huggingface_hub.constants as hub
from clawdesk.learn.offline import import_offline
import_offline()
import peft, transformers  # bitsandbytes is already in: their imports do not reach it again
assert "bitsandbytes" in sys.modules
print(attempts, hub.HF_HUB_OFFLINE)
"""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-2] == "[] False"  # no attempt; a later `clawdesk pull` may still go online
