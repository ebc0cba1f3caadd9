"""The agent loop (clawdesk/agent.py): steps, tool calls, consent, limits, cancel, and how a turn is recorded.

Most tests run the loop on ``ScriptedEngine`` with Qwen3's REAL chat template (fetched once, see
clawdesk/testing/qwen3_assets.py), so prompts render tools, calls and results exactly as Qwen3-4B
will see them; only sampling is scripted. The tools are the real built-ins over a temporary
workspace and the real SQLite log. One test serves the tiny random Qwen3 (real vocab and template)
on llama.cpp with a grammar forcing the first step's call; one runs the demo model (no tools).
"""

from __future__ import annotations

import dataclasses
import io
import json
import threading

import pytest

from clawdesk.agent import LAST_STEP_NOTE, AgentService, StepStarted, StepText, ToolFinished, ToolStarted
from clawdesk.cli import main
from clawdesk.cli.agent import ToolActivity
from clawdesk.config import ChatConfig, ToolsConfig
from clawdesk.engine import Delta, Engine
from clawdesk.models import ResolvedModel
from clawdesk.store import Store
from clawdesk.store.forget import forget_session
from clawdesk.store.steps import list_steps, tool_calls, turn_tool_calls
from clawdesk.testing.qwen3_assets import Qwen3AssetsError, qwen3_assets, write_real_qwen3_gguf
from clawdesk.tools.consent import ALLOW, Consent, instead
from clawdesk.tools.format import tool_call_grammar
from clawdesk.tools.registry import build_registry
from clawdesk.tools.types import ToolCall, ToolResult
from tests.support.scripted_engine import EOS_ID, ScriptedEngine


def call(name: str, **arguments) -> str:
    # Keys sorted, as the template's tojson re-renders them: the next prompt then holds the reply verbatim.
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments, sort_keys=True)}}}\n</tool_call>'


@pytest.fixture(scope="module")
def qwen3_template():
    try:
        return qwen3_assets().template
    except Qwen3AssetsError as exc:  # no registry: fail loudly, never skip
        pytest.fail(str(exc))


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("Homework 3: prove it.\n")
    return ws


@pytest.fixture
def agent_config(config, workspace):
    return dataclasses.replace(
        config,
        chat=ChatConfig(temperature=0.0, max_reply_tokens=256, thinking=False),
        tools=ToolsConfig(workspace=str(workspace)),
    )


@pytest.fixture
def make(agent_config, qwen3_template):
    """make(replies, **tools_config) -> (AgentService, ScriptedEngine) over the real built-in tools."""
    registries = []

    def build(replies, **tools):
        cfg = dataclasses.replace(agent_config, tools=dataclasses.replace(agent_config.tools, **tools))
        engine = ScriptedEngine(replies, template=qwen3_template)
        registry = build_registry(cfg)
        registries.append(registry)
        return AgentService(engine, cfg.chat, cfg.tools, registry), engine

    yield build
    for registry in registries:
        registry.close()


def kinds(events):
    """The events without the streamed text, as short tuples."""
    out = []
    for e in events:
        if isinstance(e, StepStarted):
            out.append(("step", e.idx))
        elif isinstance(e, ToolStarted):
            out.append(("start", e.idx, e.call_idx, e.call.name))
        elif isinstance(e, ToolFinished):
            out.append(("done", e.idx, e.call_idx, e.call.name, e.result.status))
        elif not isinstance(e, StepText):
            out.append(e)
    return out


def test_a_three_step_episode_is_recorded_with_exact_ids_per_step(make, store, workspace):
    replies = [
        "<think>\nI need the notes.\n</think>\n\n" + call("read_file", path="notes.txt"),
        "<think>\nNow write it.\n</think>\n\nI will write the answer.\n"
        + call("write_file", path="a.txt", content="QED"),
        "<think>\nDone.\n</think>\n\nThe proof is in a.txt.",
    ]
    agent, engine = make(list(replies))
    events = []

    def ask(c, spec):
        events.append(("asked", c.name))
        return ALLOW

    session = agent.new_session(store, thinking=True)
    result = agent.run_turn(store, session.id, "Do homework 3", on_event=events.append, consent=Consent(ask))

    assert kinds(events) == [
        ("step", 0), ("start", 0, 0, "read_file"), ("done", 0, 0, "read_file", "ok"),
        ("step", 1), ("asked", "write_file"), ("start", 1, 0, "write_file"), ("done", 1, 0, "write_file", "ok"),
        ("step", 2),
    ]  # fmt: skip
    assert "".join(e.delta.text for e in events if isinstance(e, StepText) and e.idx == 2) == replies[2]
    assert (workspace / "a.txt").read_text() == "QED"

    steps = list_steps(store, result.turn_id)
    assert [s.idx for s in steps] == [0, 1, 2] and [s.status for s in steps] == ["finished"] * 3
    for step, prompt_ids, reply in zip(steps, engine.prompts, replies, strict=True):
        assert step.prompt_ids == prompt_ids  # exactly what was served
        assert step.reply_ids == [*engine.tokenize(reply), EOS_ID]
    assert [s.reply_thinking for s in steps] == ["I need the notes.", "Now write it.", "Done."]
    # The turn row and its token ids are the final step's, as for a plain chat turn.
    turn = store.get_turn(result.turn_id)
    assert turn.reply_content == "The proof is in a.txt." and turn.status == "finished"
    assert store.turn_tokens(result.turn_id) == (steps[2].prompt_ids, steps[2].reply_ids)
    assert result.step_ids == tuple(s.id for s in steps) and result.stopped == ""

    calls = [tool_calls(store, s.id) for s in steps]
    assert [[(c.idx, c.name, c.arguments, c.status) for c in cs] for cs in calls] == [
        [(0, "read_file", {"path": "notes.txt"}, "ok")],
        [(0, "write_file", {"content": "QED", "path": "a.txt"}, "ok")],
        [],
    ]
    assert "Homework 3: prove it." in calls[0][0].result and calls[0][0].raw == call("read_file", path="notes.txt")
    assert all(c.duration_s >= 0 for cs in calls for c in cs)
    assert [(i, c.name) for i, c in turn_tool_calls(store, result.turn_id)] == [(0, "read_file"), (1, "write_file")]

    # Each step's prompt is the previous prompt + its reply verbatim (thinking kept, as Qwen3's template
    # does after the user's message) + the results as <tool_response> blocks.
    prompts = [o.prompt.text for o in result.steps]
    for i in (0, 1):
        assert prompts[i + 1].startswith(prompts[i] + replies[i] + "<|im_end|>\n<|im_start|>user\n<tool_response>\n")
    assert f"<tool_response>\n{calls[0][0].result}\n</tool_response>" in prompts[1]
    assert '"name": "write_file"' in prompts[0]  # the tools block lists the tools


def test_a_call_without_consent_is_denied_recorded_and_not_run(make, store, workspace):
    agent, _ = make([call("write_file", path="out.txt", content="x"), "I could not write it."])
    events = []
    session = agent.new_session(store)
    result = agent.run_turn(store, session.id, "Write out.txt", on_event=events.append)  # headless, no consent

    assert not (workspace / "out.txt").exists()
    assert ("done", 0, 0, "write_file", "denied") in kinds(events)
    assert not any(isinstance(e, ToolStarted) for e in events)  # it never started
    steps = list_steps(store, result.turn_id)
    (denied,) = tool_calls(store, steps[0].id)
    assert denied.status == "denied" and "--allow write_file" in denied.result
    assert denied.result in result.steps[1].prompt.text  # the model reads why
    assert store.get_turn(result.turn_id).reply_content == "I could not write it."


def test_no_do_this_instead_becomes_the_result_the_model_reads(make, store, workspace):
    agent, _ = make([call("write_file", path="out.txt", content="x"), "OK, appended to notes."])
    session = agent.new_session(store)
    consent = Consent(lambda c, spec: instead("append it to notes.txt instead"))
    result = agent.run_turn(store, session.id, "Write out.txt", consent=consent)
    (answer,) = tool_calls(store, list_steps(store, result.turn_id)[0].id)
    assert answer.status == "denied" and "append it to notes.txt instead" in answer.result
    assert "append it to notes.txt instead" in result.steps[1].prompt.text
    assert not (workspace / "out.txt").exists()


def test_remember_in_an_incognito_chat_is_denied_and_keeps_no_note(make, store):
    agent, _ = make([call("remember", text="my locker code is 1234"), "I will not keep it."])
    incognito = agent.new_session(store, incognito=True)
    result = agent.run_turn(store, incognito.id, "Remember my locker code 1234")
    (denied,) = tool_calls(store, list_steps(store, result.turn_id)[0].id)
    assert denied.status == "denied" and "incognito" in denied.result
    assert store.db.execute("SELECT count(*) FROM notes").fetchone() == (0,)
    # The same call in a normal chat, with the user's yes (remember is `ask`), is kept: the check above can fail.
    agent, _ = make([call("remember", text="my locker code is 1234"), "Noted."])
    normal = agent.new_session(store)
    result = agent.run_turn(store, normal.id, "Remember my locker code 1234", consent=Consent(allow={"remember"}))
    assert tool_calls(store, list_steps(store, result.turn_id)[0].id)[0].status == "ok"
    assert store.db.execute("SELECT count(*) FROM notes").fetchone() == (1,)


def test_malformed_and_unknown_calls_get_errors_the_next_step_reads(make, store):
    bad_json = '<tool_call>\n{"name": "read_file", "arguments": {"path": }}\n</tool_call>'
    agent, _ = make([bad_json + "\n" + call("fly", to="moon"), call("read_file", path="notes.txt"), "Read it."])
    events = []
    session = agent.new_session(store)
    result = agent.run_turn(store, session.id, "Read my notes", on_event=events.append)

    steps = list_steps(store, result.turn_id)
    assert len(steps) == 3
    first = tool_calls(store, steps[0].id)
    assert [(c.name, c.arguments, c.status) for c in first] == [("?", {}, "error"), ("fly", {"to": "moon"}, "error")]
    assert first[0].raw == bad_json and "could not be read" in first[0].result
    assert "there is no tool called 'fly'" in first[1].result
    for c in first:
        assert f"<tool_response>\n{c.result}\n</tool_response>" in result.steps[1].prompt.text
    assert bad_json in result.steps[1].prompt.text  # the malformed block stays in the assistant message
    assert tool_calls(store, steps[1].id)[0].status == "ok"
    assert not any(isinstance(e, ToolStarted) and e.idx == 0 for e in events)


def test_max_steps_is_respected_and_the_last_step_is_told(make, store):
    agent, engine = make([call("current_time")], max_steps=3)  # the model would call tools for ever
    session = agent.new_session(store)
    result = agent.run_turn(store, session.id, "What time is it?")

    assert len(engine.prompts) == 3 and result.stopped == "max_steps"
    steps = list_steps(store, result.turn_id)
    results = [tool_calls(store, s.id)[0] for s in steps]
    assert [r.status for r in results] == ["ok", "ok", "error"]
    note = LAST_STEP_NOTE.format(n=3)
    assert not results[0].result.endswith(note) and results[1].result.endswith(note)
    assert note in result.steps[2].prompt.text  # the last model call read it
    assert "not run" in results[2].result and "tools.max_steps" in results[2].result
    assert store.get_turn(result.turn_id).status == "finished"


def test_results_that_overflow_the_context_end_the_turn_and_what_ran_is_recorded(make, store, workspace):
    (workspace / "big.txt").write_text("word " * 2000)  # read_file's cap (10,000 bytes) lets it all through
    agent, engine = make([call("read_file", path="big.txt"), "never served"])
    engine._n_ctx = 2048  # the first prompt fits (~600 tokens with the tools block), the ~2k-token result does not
    session = agent.new_session(store)
    result = agent.run_turn(store, session.id, "Read big.txt")
    assert len(engine.prompts) == 1 and result.stopped == "context"
    (step,) = list_steps(store, result.turn_id)
    assert [c.status for c in tool_calls(store, step.id)] == ["ok"]
    assert store.get_turn(result.turn_id).status == "length"


def test_cancel_in_a_running_tool_stops_the_loop_and_records_what_ran(make, store):
    agent, engine = make([call("run_shell", command="sleep 30; echo done"), "never served"])
    session = agent.new_session(store)
    cancel = threading.Event()

    def on_event(event):
        if isinstance(event, ToolStarted):
            cancel.set()  # Esc while the command runs: the registry must stop it

    result = agent.run_turn(store, session.id, "Run it", cancel=cancel, on_event=on_event, consent=Consent(yes=True))
    assert len(engine.prompts) == 1 and result.stopped == "cancelled"
    turn = store.get_turn(result.turn_id)
    assert turn.status == "cancelled"
    (step,) = list_steps(store, result.turn_id)
    (ran,) = tool_calls(store, step.id)
    assert ran.name == "run_shell" and ran.status == "error" and "stopped by the user" in ran.result
    assert "done" not in ran.result
    assert store.turn_tokens(result.turn_id) == (step.prompt_ids, step.reply_ids)


def test_cancel_mid_reply_records_the_partial_step_and_runs_nothing(make, store, workspace):
    agent, engine = make([call("write_file", path="cut.txt", content="x")])
    engine.hold_after = 3
    session = agent.new_session(store)
    cancel = threading.Event()

    def on_event(event):
        if isinstance(event, StepText) and event.delta.n_tokens == 2:
            cancel.set()

    result = agent.run_turn(store, session.id, "Write", cancel=cancel, on_event=on_event, consent=Consent(yes=True))
    (step,) = list_steps(store, result.turn_id)
    assert step.status == "cancelled" and tool_calls(store, step.id) == []
    assert store.get_turn(result.turn_id).status == "cancelled" and not (workspace / "cut.txt").exists()


def test_forget_takes_the_steps_and_the_tool_results(make, store, config, workspace):
    secret = "ZQXJ-TOOL-RESULT-0077"
    (workspace / "secret.txt").write_text(f"the code is {secret}\n")
    agent, _ = make([call("read_file", path="secret.txt"), "Got it."])
    session = agent.new_session(store)
    result = agent.run_turn(store, session.id, "read secret.txt")

    def db_bytes() -> bytes:
        return b"".join(p.read_bytes() for p in config.home.glob("clawdesk.db*") if p.is_file())

    assert secret in tool_calls(store, result.step_ids[0])[0].result and secret.encode() in db_bytes()
    forget_session(store, session.id)
    for table in ("steps", "tool_calls"):
        assert store.db.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
    assert secret.encode() not in db_bytes()


def test_the_demo_model_answers_as_a_plain_chat(engine, store, config):
    registry = build_registry(config)
    try:
        agent = AgentService(engine, config.chat, ToolsConfig(), registry)
        assert not engine.supports_tools and not agent.tools_active
        events = []
        session = agent.new_session(store)
        result = agent.run_turn(store, session.id, "Hello!", on_event=events.append)
    finally:
        registry.close()
    (step,) = list_steps(store, result.turn_id)  # a turn served without tools is a one-step turn
    assert store.turn_tokens(result.turn_id) == (result.reply.prompt_ids, result.reply.reply_ids)
    assert (step.idx, step.prompt_ids, step.reply_ids) == (0, result.reply.prompt_ids, result.reply.reply_ids)
    assert result.step_ids == (step.id,)
    assert events[0] == StepStarted(0) and all(isinstance(e, StepText) for e in events[1:])
    assert "".join(e.delta.text for e in events[1:]).strip() == result.reply.raw_text.strip()
    assert [t.id for t in store.list_turns(session.id)] == [result.turn_id]


def test_a_plain_turn_is_one_step_whose_calls_are_never_run(agent_config, qwen3_template, store, workspace):
    # Tools off: the same runner serves one step, returns the one result type, and a <tool_call>
    # written into the reply is text (recorded as the answer), never a call that runs.
    engine = ScriptedEngine([call("write_file", path="x.txt", content="hi")], template=qwen3_template)
    agent = AgentService(engine, agent_config.chat)  # no tools config, no registry
    assert not agent.tools_active
    session = agent.new_session(store)
    result = agent.run_turn(store, session.id, "Write x.txt")
    assert len(result.steps) == 1 and len(result.step_ids) == 1 and result.stopped == ""
    assert result.status == "finished" and not result.steps[0].items
    assert len(engine.prompts) == 1 and not (workspace / "x.txt").exists()
    assert [s.id for s in list_steps(store, result.turn_id)] == list(result.step_ids)
    assert store.get_turn(result.turn_id).reply_content == result.reply.content


# -- the real engine: tiny random Qwen3 with the real vocab and template ------------------------


@pytest.fixture(scope="module")
def qwen3_engine(tmp_path_factory):
    try:
        assets = qwen3_assets()
    except Qwen3AssetsError as exc:
        pytest.fail(str(exc))
    path = write_real_qwen3_gguf(tmp_path_factory.mktemp("qwen3") / "tiny-real-qwen3.gguf", assets)
    eng = Engine.load(ResolvedModel(name="tiny-real-qwen3", path=path), sha256="test", n_ctx=2048, n_threads=1)
    yield eng
    eng.close()


def test_a_forced_call_on_real_llama_cpp_runs_and_its_result_is_the_next_prompt(
    qwen3_engine, store, agent_config, monkeypatch
):
    cfg = dataclasses.replace(agent_config, chat=ChatConfig(temperature=0.0, max_reply_tokens=40, thinking=False))
    grammar = tool_call_grammar(["current_time"], no_arguments=True)
    served = []
    generate = qwen3_engine.generate

    def first_call_forced(prompt_ids, params, **kw):
        if not served:
            kw["grammar"] = grammar  # the random model would never call on its own
        reply = generate(prompt_ids, params, **kw)
        served.append(reply)
        return reply

    monkeypatch.setattr(qwen3_engine, "generate", first_call_forced)
    registry = build_registry(cfg)
    try:
        agent = AgentService(qwen3_engine, cfg.chat, dataclasses.replace(cfg.tools, max_steps=2), registry)
        session = agent.new_session(store)
        result = agent.run_turn(store, session.id, "What time is it?")
    finally:
        registry.close()
    steps = list_steps(store, result.turn_id)
    assert len(steps) == 2 and len(served) == 2
    (ran,) = tool_calls(store, steps[0].id)
    assert (ran.name, ran.arguments, ran.status) == ("current_time", {}, "ok")
    assert [(s.prompt_ids, s.reply_ids) for s in steps] == [(r.prompt_ids, r.reply_ids) for r in served]
    tool_response = 151665  # Qwen3's <tool_response> token
    assert tool_response not in steps[0].prompt_ids and steps[1].prompt_ids.count(tool_response) == 1
    text = qwen3_engine.llm.detokenize(steps[1].prompt_ids, special=True).decode()
    assert f"<tool_response>\n{ran.result}" in text
    assert store.turn_tokens(result.turn_id) == (steps[1].prompt_ids, steps[1].reply_ids)


# -- clawdesk ask -------------------------------------------------------------------------------


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_ask_flag_errors_come_before_loading_a_model(home, capsys):
    code, _, err = run(capsys, "ask", "--workspace", str(home / "nowhere"), "hi")
    assert code == 2 and "--workspace" in err and "no such directory" in err
    code, _, err = run(capsys, "ask", "--allow", "read_file,fly", "hi")
    assert code == 2 and "--allow names no tool called fly" in err
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[tools]\nenabled = false\n")
    code, _, err = run(capsys, "ask", "--yes", "hi")
    assert code == 2 and "tools are turned off" in err
    assert "Traceback" not in err


def test_ask_on_the_demo_model_notes_that_tools_need_qwen3(home, capsys):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[chat]\nmax_reply_tokens = 4\ntemperature = 0.0\n")
    code, _, err = run(capsys, "ask", "--yes", "Hello")
    assert code == 0 and "tools need a model whose chat template can call them, e.g. Qwen3-4B" in err
    (home / "config.toml").write_text("[chat]\nmax_reply_tokens = 4\ntemperature = 0.0\n[tools]\nenabled = false\n")
    code, _, err = run(capsys, "ask", "-c", "Hello again")
    assert code == 0 and "tools need" not in err  # only when tools are on


def test_ask_on_a_model_that_can_call_tools_goes_through_the_agent_loop(qwen3_engine, home, capsys):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[model]\nn_ctx = 2048\n[chat]\nmax_reply_tokens = 8\ntemperature = 0.0\n")
    code, _, err = run(capsys, "--model", str(qwen3_engine.identity.path), "ask", "--no-think", "--yes", "hi")
    assert code == 0 and "tools need" not in err and "Traceback" not in err
    st = Store.open(home / "clawdesk.db")
    try:
        (turn,) = st.list_turns(st.latest_session().id)
        steps = list_steps(st, turn.id)  # served with tools: at least its final step is recorded
        assert steps and st.turn_tokens(turn.id) == (steps[-1].prompt_ids, steps[-1].reply_ids)
        assert "# Tools" in qwen3_engine.llm.detokenize(steps[0].prompt_ids, special=True).decode()
    finally:
        st.close()


def test_ask_streams_the_reply_without_call_blocks_and_prints_one_line_per_call():
    out, err = io.StringIO(), io.StringIO()
    activity = ToolActivity(out, err)
    read = ToolCall("read_file", {"path": "notes.txt"})
    write = ToolCall("write_file", {"path": "a.txt", "content": "x"})
    for event in [
        StepStarted(0),
        *(StepText(0, Delta(t, False, 1)) for t in ["Let me", " look.<to", "ol_call>\n{", '"name": …}']),
        ToolFinished(0, 0, read, ToolResult("read_file", "ok", "Homework 3")),
        ToolFinished(0, 1, write, ToolResult("write_file", "denied", "write_file needs the user's consent\nand none")),
        StepStarted(1),
        *(StepText(1, Delta(t, False, 1)) for t in ["It says 3 <", "b>."]),
    ]:
        activity(event)
    activity.finish()
    assert out.getvalue() == "Let me look.\nIt says 3 <b>.\n"
    assert err.getvalue().splitlines() == [
        "[tool read_file notes.txt → ok]",
        "[tool write_file a.txt → denied: write_file needs the user's consent and none]",
    ]


def test_a_reply_that_writes_the_memory_header_back_ends_before_it(agent_config, qwen3_template, store):
    from clawdesk.config import MemoryConfig
    from clawdesk.store.prefs import add_preference

    add_preference(store, "Do not use lists.")
    echo = "Paris is the capital.\n\n[user's hint / instruction]\nDo not use lists. More text."
    engine = ScriptedEngine([echo], template=qwen3_template)
    registry = build_registry(agent_config)
    try:
        agent = AgentService(
            engine, agent_config.chat, agent_config.tools, registry, memory=MemoryConfig(placement="user")
        )
        events = []
        session = agent.new_session(store)
        result = agent.run_turn(store, session.id, "Capital of France?", on_event=events.append)
    finally:
        registry.close()
    prompt = engine.detokenize(engine.prompts[0])
    assert "[user's hint / instruction]\nDo not use lists." in prompt  # the item was served in the user's turn
    # served, recorded, streamed and trained: the reply before the header, no end token (none was sampled)
    (turn,) = store.list_turns(session.id)
    assert result.reply.content == turn.reply_content == "Paris is the capital."
    assert engine.detokenize(store.turn_tokens(result.turn_id)[1]) == "Paris is the capital."
    assert "".join(e.delta.text for e in events if isinstance(e, StepText)) == "Paris is the capital."
