"""`clawdesk serve` as a real process: `kill -9` mid-stream loses no earlier turn, a restarted server
continues the recorded conversation (its session index is rebuilt from the log), and Ctrl-C stops it
soon with the reply in flight recorded as cancelled.

Also the end-to-end "learning through the API" test, which needs the headless learning loop
(``clawdesk.loop``): it is skipped, not faked, where this build has none.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clawdesk.store import Store
from clawdesk.testing.api_server import free_port

USER = [{"role": "user", "content": "Hi, who are you?"}]


def _start(home: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.Popen(
        [sys.executable, "-m", "clawdesk", "serve", "--data-dir", str(home), "--port", str(port), "--no-learn"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )


def _client(home: Path, port: int, proc: subprocess.Popen):
    import openai

    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, proc.stdout.read().decode(errors="replace")
        assert time.monotonic() < deadline, "the server did not answer within 60 s"
        if (home / "api-token").exists():
            client = openai.OpenAI(
                base_url=f"http://127.0.0.1:{port}/v1",
                api_key=(home / "api-token").read_text().strip(),
                max_retries=0,
                timeout=60,
            )
            try:
                client.models.list()
                return client
            except openai.APIConnectionError:
                pass
        time.sleep(0.2)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    proc.stdout.close()


def test_kill_9_mid_stream_loses_no_earlier_turn_and_a_restart_continues_the_session(home):
    port = free_port()
    proc = _start(home, port)
    try:
        client = _client(home, port, proc)
        first = client.chat.completions.create(model="any", messages=USER, max_tokens=16)
        stream = client.chat.completions.create(
            model="any",
            messages=[{"role": "user", "content": "Write a very long story about the sea."}],
            max_tokens=700,
            temperature=0.9,
            stream=True,
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                proc.send_signal(signal.SIGKILL)  # mid-reply, while llama.cpp generates
                break
        proc.wait(20)
        assert proc.returncode == -signal.SIGKILL
    finally:
        _stop(proc)
    store = Store.open(home / "clawdesk.db")
    try:
        assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        (turn,) = store.list_turns(store.list_sessions()[-1].id)
        status = {"stop": "finished", "length": "length"}[first.choices[0].finish_reason]
        assert (turn.status, turn.reply_content) == (status, first.choices[0].message.content)
        prompt_ids, reply_ids = store.turn_tokens(turn.id)
        assert len(reply_ids) == first.usage.completion_tokens and len(prompt_ids) == first.usage.prompt_tokens
        assert store.count_turns() == 1  # the killed reply was never half-written
        session_id = turn.session_id
    finally:
        store.close()
    # A new server process continues the recorded conversation (index rebuilt from the log).
    port = free_port()
    proc = _start(home, port)
    try:
        client = _client(home, port, proc)
        messages = [*USER, {"role": "assistant", "content": first.choices[0].message.content}]
        raw = client.chat.completions.with_raw_response.create(
            model="any", messages=[*messages, {"role": "user", "content": "And then?"}], max_tokens=4
        )
        assert int(raw.headers["x-session-id"]) == session_id
    finally:
        _stop(proc)


def test_ctrl_c_mid_stream_stops_soon_and_records_the_reply_as_cancelled(home):
    port = free_port()
    proc = _start(home, port)
    try:
        client = _client(home, port, proc)
        stream = client.chat.completions.create(
            model="any",
            messages=[{"role": "user", "content": "Write a very long story about the sea."}],
            max_tokens=700,
            temperature=0.9,
            seed=3,
            stream=True,
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                proc.send_signal(signal.SIGINT)
                break
        assert proc.wait(30) == 0
    finally:
        _stop(proc)
    store = Store.open(home / "clawdesk.db")
    try:
        (turn,) = store.list_turns(store.list_sessions()[0].id)
        assert turn.status == "cancelled" and 0 < turn.n_reply_tokens < 700
    finally:
        store.close()


@pytest.mark.slow
def test_learning_through_the_api(tmp_path):
    """Turns recorded over the API are judged and trained on, and the next request is served by the
    new adapter version, visible in /v1/models (the integration of clawdesk.loop and serve)."""
    import dataclasses

    from clawdesk import runtime
    from clawdesk.config import ChatConfig, Config
    from clawdesk.engine import Engine
    from clawdesk.engine.gate import ChatGate
    from clawdesk.models import ResolvedModel
    from clawdesk.testing.api_server import running_server
    from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

    home = tmp_path / "home"
    config = Config(home=home, chat=ChatConfig(temperature=0.7, max_reply_tokens=16, thinking=False))
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, batch_size=2))
    path = write_tiny_qwen3_gguf(tmp_path / "tiny-qwen3.gguf")
    engine = Engine.load(ResolvedModel(name="tiny-qwen3", path=path), sha256="tiny", n_ctx=1024, n_threads=1)
    store = runtime.open_store(config)
    gate = ChatGate()
    loop = runtime.build_learning_loop(config, store, engine, gate=gate, auto_train=True)
    loop.start()
    try:
        with running_server(engine, config, loop=loop, gate=gate) as srv:
            client = srv.client()
            assert client.models.list().data[0].clawdesk["adapter"] == loop.serving()
            before = loop.serving()
            messages: list[dict] = []
            for i in range(6):  # each next user message is the previous reply's next state
                messages.append({"role": "user", "content": f"Tell me fact number {i}."})
                reply = client.chat.completions.create(model="any", messages=messages)
                messages.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
            deadline = time.monotonic() + 600
            while client.models.list().data[0].clawdesk["adapter"] == before:
                assert time.monotonic() < deadline, "no new adapter version was served within 10 minutes"
                time.sleep(1)
            served = client.chat.completions.create(model="any", messages=[{"role": "user", "content": "Hi"}])
            assert served.system_fingerprint == loop.serving() != before
    finally:
        loop.close()
        engine.close()
        store.close()
