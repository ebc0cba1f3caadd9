"""The parts of `clawdesk serve` that need no model: the streamed view, session matching, request
validation, the token file and the non-loopback confirmation."""

from __future__ import annotations

import io
import stat

import pytest

from clawdesk.cli.serve import confirm_host
from clawdesk.errors import InputError
from clawdesk.serve.schema import ApiError, parse_request
from clawdesk.serve.security import Guard, allowed_hosts, load_or_create_token
from clawdesk.serve.sessions import SessionIndex, user_content
from clawdesk.serve.view import ReplyView


def _stream(view: ReplyView, raw: str, step: int = 1) -> tuple[str, str]:
    reasoning = content = ""
    for i in range(0, len(raw), step):
        r, c = view.feed(raw[i : i + step])
        reasoning, content = reasoning + r, content + c
    r, c = view.finish()
    return reasoning + r, content + c


@pytest.mark.parametrize("step", [1, 2, 5])
def test_the_view_splits_thinking_holds_back_calls_and_cuts_at_a_stop_string(step):
    raw = "<think>\nLet me see.\n</think>\n\nIt is noon.<tool_call>\n{}\n</tool_call>"
    assert _stream(ReplyView(tools=True), raw, step) == ("Let me see.", "It is noon.")
    view = ReplyView(tools=False, stops=["END"])
    assert _stream(view, "one two ENDthree", step) == ("", "one two") and view.stopped
    # A tail that only looked like a marker is sent once it is clearly text.
    assert _stream(ReplyView(tools=True, stops=["##"]), "a <tool b # c", step) == ("", "a <tool b # c")


def test_a_session_is_continued_only_from_its_latest_reply():
    index = SessionIndex()
    convo = [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]
    index.remember(7, 1, [*convo, {"role": "assistant", "content": "hello "}], side=False)
    follow = [*convo, {"role": "assistant", "content": " hello"}, {"role": "user", "content": "more"}]
    assert index.match(follow, side=False).session_id == 7  # whitespace around a reply does not matter
    assert index.match(follow, side=True).session_id is None  # side and main never mix
    index.remember(7, 2, [*follow, {"role": "assistant", "content": "sure"}], side=False)
    assert index.match(follow, side=False).session_id is None  # a regenerate of turn 2: a branch
    edited = [*convo, {"role": "assistant", "content": "HELLO"}, {"role": "user", "content": "x"}]
    assert index.match(edited, side=False).session_id is None
    tool_next = [{"role": "tool", "content": "12:00"}, {"role": "user", "content": "thanks"}]
    assert user_content([{"role": "user", "content": "q"}]) == "q"
    assert user_content(tool_next) == "[tool result]\n12:00\n\nthanks"


def test_request_validation_names_the_bad_field():
    def param(body) -> str | None:
        with pytest.raises(ApiError) as err:
            parse_request(body)
        assert err.value.status == 400
        return err.value.param

    user = [{"role": "user", "content": "hi"}]
    assert param({"messages": [{"role": "robot", "content": "x"}]}) == "messages[0].role"
    assert param({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}) == "messages[0].content"
    assert param({"messages": user, "stop": ["a"] * 5}) == "stop"
    assert param({"messages": user, "tool_choice": {"type": "function", "function": {"name": "f"}}}) == "tool_choice"
    req = parse_request(
        {
            "messages": [
                {"role": "developer", "content": "be brief"},
                *user,
                {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            ],
            "max_completion_tokens": 9,
            "stop": "x",
        }
    )
    assert [m["role"] for m in req.messages] == ["system", "user", "assistant", "tool"]
    assert req.messages[2]["tool_calls"][0]["function"]["arguments"] == {} and req.max_tokens == 9
    assert req.stop == ("x",)


def test_the_token_file_is_private_and_kept(tmp_path):
    token, path = load_or_create_token(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(token) >= 32
    path.chmod(0o644)
    assert load_or_create_token(tmp_path) == (token, path) and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_guard_accepts_only_the_bound_host_known_origins_and_the_token():
    guard = Guard(None, token="t" * 20, hosts=allowed_hosts("127.0.0.1", 8765), origins=["http://localhost:3000"])
    ok = {"host": "127.0.0.1:8765", "authorization": "Bearer " + "t" * 20}
    assert guard.check(ok) is None and guard.check({**ok, "host": "localhost:8765"}) is None
    assert guard.check({**ok, "origin": "http://localhost:3000"}) is None
    assert guard.check({**ok, "host": "evil.example:8765"}).status == 403
    assert guard.check({**ok, "host": "127.0.0.1:9999"}).status == 403
    assert guard.check({**ok, "origin": "http://evil.example"}).status == 403
    assert guard.check({**ok, "authorization": "Bearer nope"}).status == 401
    wildcard = Guard(
        None, token="t" * 20, hosts=allowed_hosts("0.0.0.0", 8765), extra_hosts=["host.docker.internal:8765"]
    )
    assert wildcard.check({**ok, "host": "host.docker.internal:8765"}) is None
    assert wildcard.check({**ok, "host": "192.168.1.5:8765"}) is None
    assert wildcard.check({**ok, "host": "rebound.example:8765"}).status == 403


def test_a_non_loopback_host_needs_confirmation(monkeypatch):
    assert confirm_host("127.0.0.1", yes=False) and confirm_host("0.0.0.0", yes=True)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal: nobody to ask
    with pytest.raises(InputError, match="--yes"):
        confirm_host("0.0.0.0", yes=False)
    tty = io.StringIO("no\n")
    tty.isatty = lambda: True
    monkeypatch.setattr("sys.stdin", tty)
    assert confirm_host("192.168.1.5", yes=False) is False


def test_a_taken_port_is_said_before_the_model_loads(home, capsys):
    import socket

    from clawdesk.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        code = main(["serve", "--port", str(taken.getsockname()[1])])
    assert code == 2 and "cannot listen on 127.0.0.1" in capsys.readouterr().err
    assert not (home / "clawdesk.db").exists()  # nothing was opened or loaded
