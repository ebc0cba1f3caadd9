"""`clawdesk serve` through the real `openai` client, on the real demo model, over a loopback port.

The server runs in this process (clawdesk.testing.api_server: the CLI's worker, guard and uvicorn);
what it records is read back from the real SQLite log. Tool calls are in test_serve_tools.py, the
`kill -9` and restart checks in test_serve_crash.py.
"""

from __future__ import annotations

import http.client
import json
import threading
import time

import openai
import pytest

from clawdesk.store.judgments import pending_turns
from clawdesk.testing.api_server import running_server

USER = [{"role": "user", "content": "Hi, who are you?"}]


@pytest.fixture
def server(engine, config):
    with running_server(engine, config) as srv:
        yield srv


def _turns(store):
    return store.db.execute(
        "SELECT id, session_id, seq, status, user_content, reply_content, n_reply_tokens, learning "
        "FROM turns ORDER BY id"
    ).fetchall()


def _wait_turns(store, n: int, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while len(rows := _turns(store)) < n:
        assert time.monotonic() < deadline, f"{len(rows)} turn(s) recorded, waited for {n}"
        time.sleep(0.05)
    return rows


def _raw(server, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    """A request with exactly the headers given (http.client adds Host only when none is given)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        hdrs = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json", **(headers or {})}
        hdrs = {k: v for k, v in hdrs.items() if v is not None}
        if body is not None:
            hdrs["Content-Length"] = str(len(body))
        skip_host = "Host" in hdrs
        conn.putrequest(method, path, skip_host=skip_host, skip_accept_encoding=True)
        for k, v in hdrs.items():
            conn.putheader(k, v)
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


def test_a_plain_completion_is_recorded_with_the_exact_prompt_and_reply_ids(server, engine, config, store):
    raw = server.client().chat.completions.with_raw_response.create(model="any", messages=USER, max_tokens=24)
    reply = raw.parse()
    assert reply.object == "chat.completion" and reply.model == engine.identity.name
    text = reply.choices[0].message.content
    assert text and reply.choices[0].finish_reason in ("stop", "length")
    ((turn_id, session_id, seq, status, user, recorded, n_reply, learning),) = _turns(store)
    assert int(raw.headers["x-session-id"]) == session_id and int(raw.headers["x-turn-id"]) == turn_id
    assert (seq, user, recorded, learning) == (1, USER[0]["content"], text, 1)
    prompt_ids, reply_ids = store.turn_tokens(turn_id)
    # The client sent no system message: ClawDesk's own system prompt is used, as in the TUI.
    expected = engine.tokenize(
        engine.render([{"role": "system", "content": config.chat.system_prompt}, *USER], thinking=False)
    )
    assert prompt_ids == expected and reply.usage.prompt_tokens == len(expected)
    assert len(reply_ids) == n_reply == reply.usage.completion_tokens
    assert status == {"stop": "finished", "length": "length"}[reply.choices[0].finish_reason]
    assert store.get_session(session_id).system_prompt == config.chat.system_prompt


def test_a_streamed_completion_arrives_in_chunks_and_matches_the_recorded_reply(server, store):
    stream = server.client().chat.completions.create(
        model="any", messages=USER, max_tokens=24, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 3  # streamed, not sent in one piece
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish in (["stop"], ["length"])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    ((turn_id, session_id, _, status, _, recorded, n_reply, _),) = _turns(store)
    assert "".join(pieces) == recorded and n_reply == chunks[-1].usage.completion_tokens
    # A new conversation's session is written with its turn: its id comes in the last chunk.
    (last,) = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert last.model_extra["clawdesk"] == {"session_id": session_id, "turn_id": turn_id, "status": status}


def test_two_requests_are_one_session_and_the_second_user_message_is_the_first_replys_next_state(server, store):
    client = server.client()
    first = client.chat.completions.create(model="any", messages=USER, max_tokens=16)
    follow = "Thanks! And what can you do?"
    conversation = [*USER, {"role": "assistant", "content": first.choices[0].message.content}]
    second = client.chat.completions.create(
        model="any", messages=[*conversation, {"role": "user", "content": follow}], max_tokens=16
    )
    rows = _turns(store)
    assert [(r[1], r[2]) for r in rows] == [(rows[0][1], 1), (rows[0][1], 2)]
    (pending,) = pending_turns(store)  # the judge's own query: turn 1 is ready, with its next state
    assert (pending.turn.id, pending.next_turn_id, pending.next_state) == (rows[0][0], rows[1][0], follow)
    # A "regenerate" of the second message is a branch: a new session, not turn 1's next state again.
    client.chat.completions.create(
        model="any", messages=[*conversation, {"role": "user", "content": follow}], max_tokens=4
    )
    assert _turns(store)[2][1] != rows[0][1]
    # X-Session-Id continues a session outright.
    third = client.chat.completions.with_raw_response.create(
        model="any",
        messages=[{"role": "user", "content": "One more thing."}],
        max_tokens=4,
        extra_headers={"X-Session-Id": str(rows[0][1])},
    )
    assert int(third.headers["x-session-id"]) == rows[0][1] and _turns(store)[3][1:3] == (rows[0][1], 3)
    assert second.choices[0].message.content


def test_a_side_turn_is_recorded_but_never_learned_from_nor_a_main_replys_next_state(server, store):
    client = server.client()
    client.chat.completions.create(model="any", messages=USER, max_tokens=8)
    main_session = _turns(store)[0][1]
    client.chat.completions.create(
        model="any",
        messages=[{"role": "user", "content": "Summarise the chat in three words."}],
        max_tokens=8,
        extra_headers={"X-Turn-Type": "side", "X-Session-Id": str(main_session)},
    )
    main, side = _turns(store)
    assert side[1] != main_session and side[7] == 0 and main[7] == 1
    assert pending_turns(store) == []  # the main reply still waits for the user's next message


def test_a_missing_or_wrong_token_is_refused_with_401_in_openais_error_shape(server):
    with pytest.raises(openai.AuthenticationError) as wrong:
        server.client(api_key="not-the-token").models.list()
    assert wrong.value.status_code == 401 and wrong.value.body["code"] == "invalid_api_key"
    status, body = _raw(server, "GET", "/v1/models", headers={"Authorization": None})
    assert status == 401 and set(body["error"]) == {"message", "type", "param", "code"}
    assert "no API token" in body["error"]["message"]


def test_a_foreign_host_or_browser_origin_is_refused(server):
    status, body = _raw(server, "GET", "/v1/models", headers={"Host": f"attacker.example:{server.port}"})
    assert status == 403 and body["error"]["code"] == "host_not_allowed"
    with pytest.raises(openai.PermissionDeniedError) as origin:
        server.client(default_headers={"Origin": "https://attacker.example"}).models.list()
    assert origin.value.body["code"] == "origin_not_allowed"
    assert _raw(server, "GET", "/v1/models", headers={"Host": f"localhost:{server.port}"})[0] == 200


def test_a_bad_body_is_answered_with_openais_error_json(server, store):
    client = server.client()
    with pytest.raises(openai.BadRequestError) as hot:
        client.chat.completions.create(model="any", messages=USER, temperature=7)
    assert hot.value.body["param"] == "temperature" and hot.value.body["type"] == "invalid_request_error"
    status, body = _raw(server, "POST", "/v1/chat/completions", body=b"{not json")
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    status, body = _raw(server, "POST", "/v1/chat/completions", body=json.dumps({"model": "x"}).encode())
    assert status == 400 and body["error"]["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as tools:  # the demo model's template cannot render tools
        client.chat.completions.create(
            model="any", messages=USER, tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]
        )
    assert tools.value.body["code"] == "model_not_supported"
    assert _raw(server, "GET", "/v1/nothing")[0] == 404
    assert _turns(store) == []  # nothing served, nothing recorded


def test_a_stop_string_ends_the_reply_and_is_not_sent(server, store):
    client = server.client()
    full = client.chat.completions.create(model="any", messages=USER, max_tokens=24).choices[0].message.content
    stop = next(c for c in (",", "!", ".", " ") if c in full[1:])
    cut = client.chat.completions.create(model="any", messages=USER, max_tokens=24, stop=[stop])
    assert cut.choices[0].message.content == full[: full.index(stop, 1)].rstrip()
    assert cut.choices[0].finish_reason == "stop"
    assert _turns(store)[1][3:6:2] == ("finished", cut.choices[0].message.content)


def test_a_reply_that_loops_ends_as_a_length_cut_long_before_max_tokens(server, store):
    poem = [{"role": "user", "content": "Write a poem."}]  # greedy SmolLM2: "A realm of shadows," over and over
    reply = server.client().chat.completions.create(model="any", messages=poem, max_tokens=400, temperature=0)
    assert reply.choices[0].finish_reason == "length" and "A realm of shadows,\nA realm of shadows," in (
        reply.choices[0].message.content
    )
    assert 64 <= reply.usage.completion_tokens < 200  # chat.repeat_stop = 64 (the app's [chat], as in the TUI)
    assert _turns(store)[0][3] == "length"


def test_a_client_that_disconnects_mid_stream_cancels_the_generation_and_it_is_recorded_cancelled(server, store):
    stream = server.client().chat.completions.create(
        model="any",
        messages=[{"role": "user", "content": "Write a very long story about a lighthouse keeper and the sea."}],
        max_tokens=700,
        temperature=0.9,
        seed=7,
        stream=True,
    )
    got = 0
    for chunk in stream:
        got += bool(chunk.choices and chunk.choices[0].delta.content)
        if got == 2:
            break
    stream.close()  # the connection goes away mid-reply
    ((_, _, _, status, _, _, n_reply, _),) = _wait_turns(store, 1)
    assert status == "cancelled" and 2 <= n_reply < 700


def test_a_client_that_gives_up_on_a_whole_reply_cancels_it_too(server, store):
    with pytest.raises(openai.APITimeoutError):
        server.client(timeout=0.5).chat.completions.create(
            model="any",
            messages=[{"role": "user", "content": "Write a very long story about a lighthouse keeper and the sea."}],
            max_tokens=700,
            temperature=0.9,
            seed=7,
        )
    ((_, _, _, status, _, _, n_reply, _),) = _wait_turns(store, 1)
    assert status == "cancelled" and n_reply < 700


def test_two_clients_at_once_are_both_served(server, store):
    results: dict[int, str] = {}

    def ask(i: int) -> None:
        reply = server.client().chat.completions.create(
            model="any", messages=[{"role": "user", "content": f"Name a colour, number {i}."}], max_tokens=16
        )
        results[i] = reply.choices[0].message.content

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == [0, 1] and all(results.values())
    rows = _turns(store)
    assert len(rows) == 2 and rows[0][1] != rows[1][1]


def test_models_lists_the_served_model_and_its_adapter(server, engine):
    (model,) = server.client().models.list().data
    assert model.id == engine.identity.name and model.owned_by == "clawdesk"
    assert model.clawdesk["adapter"] == "base" and model.clawdesk["learning_loop"] is False
    assert server.client().models.retrieve(engine.identity.name).id == engine.identity.name
