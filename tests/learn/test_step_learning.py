"""Learning from tool next states: the judge on a tool step's results, the step-wise reward, step samples.

Real SQLite logs (agent turns written with clawdesk.store.steps.add_agent_turn, as the agent loop
does), the real registry for the denial texts, the real demo engine for the judge, and the tiny
Qwen3 with its real template for the teacher prompt of a step whose prompt has tools and results.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from clawdesk.config import ChatConfig, Config, JudgeConfig, TrainConfig, load_config
from clawdesk.engine.prompt import build_messages
from clawdesk.errors import ConfigError, TrainError
from clawdesk.judge.parse import enhanced_user_message
from clawdesk.judge.runner import Judge
from clawdesk.judge.service import judge_pending
from clawdesk.judge.teacher import step_context, teacher_prompt
from clawdesk.judge.tool_steps import CHANNEL_VERSION, RULES_VERSION
from clawdesk.learn import versions
from clawdesk.learn.samples import count_ready, ready_samples
from clawdesk.store import NewTurn, Store, now_iso
from clawdesk.store.forget import forget_turn
from clawdesk.store.judgments import Judgment, save_judgment, set_rating, set_veto
from clawdesk.store.step_judgments import (
    StepJudgment,
    get_step_judgment,
    pending_steps,
    save_step_judgment,
    step_backlog,
)
from clawdesk.store.steps import NewStep, NewToolCall, add_agent_turn
from clawdesk.tools.consent import Consent, instead
from clawdesk.tools.format import assistant_message, tool_messages
from clawdesk.tools.types import ToolCall, ToolResult

SHA = "base-sha"
READ = '<tool_call>\n{"name": "read_file", "arguments": {"path": "notes.txt"}}\n</tool_call>'
BAD_ARGS = "bad arguments for read_file: 'path' is required. Call it as read_file(path: string)"


@pytest.fixture
def st(tmp_path):
    store = Store.open(tmp_path / "clawdesk.db")
    yield store
    store.close()


def call(status="ok", result="Buy milk and eggs.", name="read_file") -> NewToolCall:
    return NewToolCall(name, {"path": "notes.txt"}, READ, result, status, 0.01)


def step(prompt, reply, calls=(), content=READ, status="finished") -> NewStep:
    at = now_iso()
    return NewStep(list(prompt), list(reply), content, "", status, at, at, calls=tuple(calls))


def agent_turn(
    st, session_id, steps, *, sha=SHA, user="What is in notes.txt?", thinking=False
) -> tuple[int, list[int]]:
    """A turn of the agent loop: the final step's ids are the turn's, as the loop records it."""
    final = steps[-1]
    at = now_iso()
    turn = NewTurn(
        user_content=user, reply_content=final.reply_content, reply_thinking="", status="finished", thinking=thinking,
        model_name="base", model_path="/m.gguf", model_sha256=sha, prompt_ids=final.prompt_ids,
        reply_ids=final.reply_ids, started_at=at, finished_at=at,
    )  # fmt: skip
    return add_agent_turn(st, session_id, turn, steps)


def three_steps(st, session_id, **kw) -> tuple[int, list[int]]:
    """Step 0 reads a file, step 1 runs a command, step 2 answers: two tool steps and the final answer."""
    return agent_turn(
        st,
        session_id,
        [
            step((1, 2), (10, 11), [call()]),
            step((1, 2, 10, 11, 12), (20, 21, 22), [call(result="exit code 0\nok", name="run_shell")]),
            step((1, 2, 10, 11, 12, 20, 21, 22, 23), (30,), content="Your notes say: buy milk and eggs."),
        ],
        **kw,
    )


def judge_step_row(st, step_id, votes, hint=None, enhanced=None) -> None:
    save_step_judgment(
        st,
        StepJudgment(
            step_id=step_id, prompt_version="test", judge_model_name="judge", judge_model_sha256="judge-sha",
            score_outputs=[""] * len(votes), votes=list(votes), hint_outputs=[], hint=hint,
            enhanced_prompt_ids=enhanced, seconds=0.0,
        ),
    )  # fmt: skip


def judge_turn(st, turn_id, reward) -> None:
    save_judgment(
        st,
        Judgment(
            turn_id=turn_id, next_turn_id=turn_id, prompt_version="v3", judge_model_name="judge",
            judge_model_sha256="judge-sha", score_outputs=[], votes=[reward] * 3, reward=reward, hint_outputs=[],
            hint=None, enhanced_user=None, enhanced_prompt_ids=None, seconds=0.0,
        ),
    )  # fmt: skip


def rewards(st, mode="stepwise") -> list[tuple[int | None, float]]:
    out = [(s.step_id, round(s.reward, 6)) for s in ready_samples(st, SHA, step_reward=mode)]
    assert count_ready(st, SHA, step_reward=mode) == len(out)  # the UI's count and the trainer's batch agree
    return out


# -- the step-wise reward -----------------------------------------------------------------------


def test_stepwise_reward_of_a_three_step_episode_is_the_outcome_plus_the_mean_vote(st):
    session = st.create_session(system_prompt="sys")
    turn_id, (s0, s1, s2) = three_steps(st, session.id)
    judge_step_row(st, s0, [1, 1, -1])  # Σ r / m = 1/3
    judge_step_row(st, s1, [-1, -1, None])  # an invalid vote counts 0: -2/3
    assert rewards(st) == []  # the outcome o is not known yet: nothing is ready
    judge_turn(st, turn_id, 1)  # o = +1 (the user's next message was happy)
    assert rewards(st) == [(s0, round(1 + 1 / 3, 6)), (s1, round(1 - 2 / 3, 6)), (None, 1.0)]

    samples = ready_samples(st, SHA)
    assert [s.turn_id for s in samples] == [turn_id] * 3
    assert (samples[0].prompt_ids, samples[0].reply_ids) == ([1, 2], [10, 11])  # the exact ids of each model call
    assert (samples[1].prompt_ids, samples[1].reply_ids) == ([1, 2, 10, 11, 12], [20, 21, 22])
    assert (samples[2].prompt_ids, samples[2].reply_ids) == ([1, 2, 10, 11, 12, 20, 21, 22, 23], [30])
    assert s2 not in {s.step_id for s in samples}  # the final step is the turn's own sample, not twice

    set_rating(st, turn_id, -1)  # thumbs down beats the judge: o = -1
    assert rewards(st) == [(s0, round(-1 + 1 / 3, 6)), (s1, round(-1 - 2 / 3, 6)), (None, -1.0)]


def test_outcome_mode_gives_every_step_the_outcome(st):
    session = st.create_session(system_prompt="sys")
    turn_id, (s0, s1, _) = three_steps(st, session.id)
    judge_step_row(st, s0, [1, 1, 1])
    judge_step_row(st, s1, [-1, -1, -1])
    judge_turn(st, turn_id, -1)
    assert rewards(st, "outcome") == [(s0, -1.0), (s1, -1.0), (None, -1.0)]
    # Step-wise, step 0 cancels out (o + 1 = 0, no hint): no signal, not a sample.
    assert rewards(st, "stepwise") == [(s1, -2.0), (None, -1.0)]
    with pytest.raises(ValueError, match="stepwise"):
        count_ready(st, SHA, step_reward="bogus")


def test_a_step_is_ready_only_once_judged_and_once_the_outcome_is_known(st):
    session = st.create_session(system_prompt="sys")
    turn_id, (s0, s1, _) = three_steps(st, session.id)
    judge_step_row(st, s0, [1, 1, 1])
    set_rating(st, turn_id, 1)  # rated but not judged: o is known for the steps
    assert rewards(st) == [(s0, 2.0)]  # step 1 is not judged yet; the turn itself still needs the judge
    judge_step_row(st, s1, [0, 0, 0], hint="use -q", enhanced=[1, 2, 9, 9])
    samples = ready_samples(st, SHA)
    assert [s.step_id for s in samples] == [s0, s1]
    assert samples[1].reward == 1.0 and samples[1].teacher_prompt_ids == [1, 2, 9, 9] and samples[1].hint == "use -q"


def test_step_samples_are_trained_once_and_recorded_with_their_version(st, tmp_path):
    session = st.create_session(system_prompt="sys")
    turn_id, (s0, s1, _) = three_steps(st, session.id)
    judge_step_row(st, s0, [1, 1, 1])
    judge_step_row(st, s1, [-1, -1, -1], hint="run it with -q", enhanced=[5, 6])
    judge_turn(st, turn_id, 1)
    batch = ready_samples(st, SHA)
    record = dict(
        status="ready", parent_version=None, base_name="base", base_sha256=SHA, metrics={}, validation={},
        note="", created_at=now_iso(),
    )  # fmt: skip
    versions.record_version(st, version=1, path=tmp_path / "v1", samples=batch, **record)
    assert ready_samples(st, SHA) == [] and count_ready(st, SHA) == 0
    rows = st.db.execute(
        "SELECT version, step_id, reward, has_hint FROM adapter_samples WHERE step_id IN (?, ?) ORDER BY step_id",
        [s0, s1],
    )
    assert [tuple(r) for r in rows] == [(1, s0, 2.0, 0), (1, s1, 0.0, 1)]
    assert versions.version_samples(st, 1) == [{"turn_id": turn_id, "reward": 1.0, "has_hint": False}]
    with pytest.raises(TrainError, match=rf"tool step {s0} \(v1\)"):
        versions.record_version(st, version=2, path=tmp_path / "v2", samples=batch[:1], **record)


def test_incognito_learning_off_vetoed_other_base_and_forgotten_turns_give_no_step_samples(st):
    def episode(session_id, **kw) -> int:
        turn_id, (s0, s1, _) = three_steps(st, session_id, **kw)
        judge_step_row(st, s0, [1, 1, 1])
        judge_step_row(st, s1, [1, 1, 1])
        judge_turn(st, turn_id, 1)
        return turn_id

    kept = episode(st.create_session(system_prompt="sys").id)
    assert len(rewards(st)) == 3
    episode(st.create_session(system_prompt="sys", incognito=True).id)
    episode(st.create_session(system_prompt="sys").id, sha="other-base")
    st.set_learning(False)
    episode(st.create_session(system_prompt="sys").id)
    st.set_learning(True)
    vetoed = episode(st.create_session(system_prompt="sys").id)
    set_veto(st, vetoed)
    assert {s.turn_id for s in ready_samples(st, SHA)} == {kept} and len(rewards(st)) == 3
    forget_turn(st, kept)  # its steps, step judgments (and step samples) go with it
    assert rewards(st) == []
    assert st.db.execute("SELECT count(*) FROM judgments WHERE next_state = 'tools'").fetchone()[0] == 8
    assert st.db.execute("SELECT count(*) FROM steps WHERE turn_id = ?", [kept]).fetchone()[0] == 0


def test_pending_steps_are_the_non_final_steps_of_learnable_turns(st):
    session = st.create_session(system_prompt="sys")
    turn_id, (s0, s1, s2) = three_steps(st, session.id)
    three_steps(st, st.create_session(system_prompt="sys", incognito=True).id)
    st.set_learning(False)
    three_steps(st, session.id)
    st.set_learning(True)
    agent_turn(st, session.id, [step((1,), (2,), content="no tools needed")])  # a one-step turn: nothing to judge
    assert [p.step.id for p in pending_steps(st)] == [s0, s1] and step_backlog(st) == 2
    first = pending_steps(st, limit=1)[0]
    assert first.turn.id == turn_id and [c.result for c in first.calls] == ["Buy milk and eggs."]
    judge_step_row(st, s0, [1, 1, 1])
    assert [p.step.id for p in pending_steps(st)] == [s1] and s2 not in {p.step.id for p in pending_steps(st)}


def test_step_reward_is_validated_in_config_toml(tmp_path):
    assert TrainConfig().step_reward == "stepwise" and TrainConfig(step_reward="outcome").step_reward == "outcome"
    with pytest.raises(ValueError, match=r"train\.step_reward"):
        TrainConfig(step_reward="per-turn")
    (tmp_path / "config.toml").write_text('[train]\nstep_reward = "sometimes"\n')
    with pytest.raises(ConfigError, match=r"config\.toml.*step_reward|step_reward.*config\.toml"):
        load_config(tmp_path)


# -- the judge on a tool next state (real registry texts, real demo engine) ---------------------


def _registry_result(tmp_path, decision) -> ToolResult:
    """What the real registry returns for a write the user refused (or nobody could be asked about)."""
    from clawdesk.tools.builtins import BuiltinTools
    from clawdesk.tools.jail import Workspace
    from clawdesk.tools.registry import Registry

    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    tools = BuiltinTools(Workspace(ws), tmp_path / "notes.db", read_max_bytes=2000, output_max_chars=4000)
    reg = Registry([tools], timeout_s=5.0, output_max_chars=4000)
    consent = Consent(ask=(lambda c, s: decision) if decision is not None else None)
    result = reg.run(ToolCall("write_file", {"path": "a.txt", "content": "x"}), consent)
    assert result.status == "denied" and not (ws / "a.txt").exists()
    return result


@pytest.fixture
def judge(engine):
    return Judge(engine, JudgeConfig(votes=3))


def _one_step(st, engine, calls, user="Save my notes to a.txt") -> object:
    session = st.create_session(system_prompt="sys")
    agent_turn(st, session.id, [step((1, 2), (3,), calls), step((1, 2, 3, 4), (5,), content="done")], user=user)
    return pending_steps(st)[-1]  # the step just recorded (Judge.judge_step saves nothing)


def test_an_error_result_votes_minus_one_and_its_message_is_the_hint(st, engine, judge):
    pending = _one_step(st, engine, [call("error", BAD_ARGS)])
    sj = judge.judge_step(st, pending)
    assert sj.votes == [-1, -1, -1] and sj.prompt_version == RULES_VERSION and sj.reward == -1.0
    assert sj.hint == f"read_file: {BAD_ARGS}"
    assert sj.enhanced_prompt_ids is None and "another model" in sj.note  # served by "base", judged by the demo


def test_a_refusal_with_instead_text_is_the_hint_and_a_headless_denial_is_no_signal(st, engine, judge, tmp_path):
    said = _registry_result(tmp_path, instead("Don't write files; just show me the notes here."))
    timeout = call("timeout", "run_shell timed out after 30 s; the whole process group was stopped", "run_shell")
    pending = _one_step(st, engine, [timeout, call("denied", said.content, "write_file")])
    sj = judge.judge_step(st, pending)
    assert sj.votes == [-1, -1, -1] and sj.hint == "Don't write files; just show me the notes here."  # beats the error

    headless = _registry_result(tmp_path, None)
    sj = judge.judge_step(st, _one_step(st, engine, [call("denied", headless.content, "write_file")]))
    assert sj.votes == [0, 0, 0] and sj.hint is None and sj.reward == 0.0

    sj = judge.judge_step(st, _one_step(st, engine, [call("denied", "The user denied this call to write_file.")]))
    assert sj.votes == [-1, -1, -1] and sj.hint is None


@pytest.mark.slow  # ~5 s alone, 25 s on a loaded 2-core machine
def test_an_ok_result_is_judged_by_the_model_and_not_voted_down(st, engine, judge):
    ok = call("ok", "2026-12-03 09:00 (Thursday)", "current_time")
    pending = _one_step(st, engine, [ok], user="What time is it?")
    sj = judge.judge_step(st, pending)
    assert sj.prompt_version == CHANNEL_VERSION and len(sj.votes) == 3 and all(v in (1, -1) for v in sj.votes)
    assert all(o.startswith("channel worked=") for o in sj.score_outputs)  # scored on the result text, no rules
    assert sj.reward > 0 and sj.hint is None  # measured on the demo model: +1 ×3


# -- the teacher prompt of a step, and `clawdesk judge` over steps ------------------------------


def test_judge_pending_judges_tool_steps_and_their_teacher_prompt_is_the_step_prompt_with_the_hint(st, engine, judge):
    """Demo engine (its template renders tool messages as plain roles); step prompts built as the loop builds them."""
    calls = [ToolCall("read_file", {"file": "notes.txt"})]
    results = [ToolResult("read_file", "error", BAD_ARGS)]
    user = "What is in notes.txt?"
    later = [assistant_message("", calls), *tool_messages(results)]
    first = engine.build_prompt("sys", [], user, thinking=False, reply_room=32).token_ids
    second = engine.build_prompt("sys", [], user, thinking=False, reply_room=32, steps=later).token_ids
    session = st.create_session(system_prompt="sys")
    _, (s0, _) = agent_turn(
        st, session.id,
        [step(first, (7, 8), [call("error", BAD_ARGS)]), step(second, (9,), content="It says: buy milk.")],
        sha=engine.identity.sha256, user=user,
    )  # fmt: skip
    events = []
    summary = judge_pending(st, judge, max_age_hours=72, on_event=events.append)
    assert summary.judged == 0 and summary.steps_judged == 1 and summary.step_rewards[-1] == 1
    assert summary.step_hints == 1 and step_backlog(st) == 0
    assert sum(e.kind == "vote" for e in events) == 6 and events[-1].step_judgment.step_id == s0
    row = get_step_judgment(st, s0)
    assert json.loads(json.dumps(row["votes"])) == [-1, -1, -1]
    enhanced = enhanced_user_message(user, f"read_file: {BAD_ARGS}")
    assert row["enhanced_prompt_ids"] == engine.tokenize(
        engine.render(build_messages("sys", [], enhanced), thinking=False)
    )


def _step_context(pending):
    return step_context(pending.turn, pending.step.prompt_ids, pending.first_prompt_ids)


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    from clawdesk.engine import Engine
    from clawdesk.models import ResolvedModel
    from clawdesk.testing.qwen3_assets import Qwen3AssetsError, qwen3_assets, write_real_qwen3_gguf

    try:
        assets = qwen3_assets()
    except Qwen3AssetsError as exc:  # no registry: fail loudly, never skip
        pytest.fail(str(exc))
    path = write_real_qwen3_gguf(tmp_path_factory.mktemp("qwen3") / "tiny-real-qwen3.gguf", assets)
    eng = Engine.load(ResolvedModel(name="tiny-real-qwen3", path=path), sha256="qwen3", n_ctx=2048, n_threads=1)
    yield eng
    eng.close()


@pytest.mark.parametrize("thinking", [False, True])
def test_teacher_prompt_of_a_later_step_keeps_the_tools_calls_and_results_of_the_real_qwen3_template(
    st, qwen3, thinking
):
    from clawdesk.tools.builtins import SPECS

    tools = [s.schema() for s in SPECS if s.name in ("read_file", "run_shell")]
    user, hint = "Summarise notes/3.txt, then run the tests.", "Run the tests with pytest -q, not python -m unittest."
    calls0 = [ToolCall("read_file", {"path": "notes/3.txt"})]
    calls1 = [ToolCall("run_shell", {"command": "python -m unittest"})]
    done0 = [
        assistant_message("", calls0, thinking="I should read it."),
        *tool_messages([ToolResult("read_file", "ok", "3: café")]),
    ]
    done1 = [*done0, assistant_message("", calls1), *tool_messages([ToolResult("run_shell", "error", "exit code 5")])]
    prompts = [
        qwen3.build_prompt(
            "You are ClawDesk.", [], user, thinking=thinking, reply_room=64, tools=tools, steps=s
        ).token_ids
        for s in ((), done0, done1)
    ]
    session = st.create_session(system_prompt="You are ClawDesk.")
    agent_turn(
        st, session.id,
        [step(prompts[0], (1,), [call()]), step(prompts[1], (2,), [call("error", "exit code 5", "run_shell")]),
         step(prompts[2], (3,), content="Done.")],
        sha="qwen3", user=user, thinking=thinking,
    )  # fmt: skip
    enhanced = enhanced_user_message(user, hint)
    for pending, later in zip(pending_steps(st), ((), done0), strict=True):
        ids, problem = teacher_prompt(qwen3, _step_context(pending), enhanced)
        rendered = qwen3.render(
            build_messages("You are ClawDesk.", [], enhanced, later), thinking=thinking, tools=tools
        )
        assert problem == "" and ids == qwen3.tokenize(rendered)
        assert ids != pending.step.prompt_ids and len(ids) > len(pending.step.prompt_ids)
    # A prompt that is not this turn's (another system prompt served) gets no teacher prompt, never a wrong one.
    other = dataclasses.replace(pending_steps(st)[1], first_prompt_ids=prompts[0][:-3])
    ids, problem = teacher_prompt(qwen3, _step_context(other), enhanced)
    assert ids is None and "not found" in problem


def test_clawdesk_judge_counts_tool_steps(home, capsys):
    from clawdesk.cli import main
    from clawdesk.runtime import open_store

    config = Config(home=home, chat=ChatConfig(temperature=0.0, max_reply_tokens=16))
    st = open_store(config)
    try:
        session = st.create_session(system_prompt="sys")
        agent_turn(st, session.id, [step((1, 2), (3,), [call("error", BAD_ARGS)]), step((1, 2, 3), (4,))])
    finally:
        st.close()
    assert main(["judge"]) == 0
    out = capsys.readouterr().out
    assert "judged 0 turn(s)" in out and "judged 1 tool step(s) from their results: +1 ×0, -1 ×1, 0 ×0; hints: 1" in out


@pytest.mark.slow  # loads the tiny base and writes a version: ~15 s, 25 s under load
def test_a_training_step_on_tool_steps_records_them_and_the_reward_mode(tmp_path):
    """The real trainer on the tiny Qwen3: a 3-step episode is one batch; the version says which step reward it used."""
    from clawdesk.learn.trainer import train
    from clawdesk.testing.tiny_qwen3 import write_tiny_qwen3_gguf

    gguf = write_tiny_qwen3_gguf(tmp_path / "tiny-qwen3.gguf")  # vocabulary of 283 ids
    db, adapters = tmp_path / "clawdesk.db", tmp_path / "adapters"
    st = Store.open(db)
    try:
        turn_id, (s0, s1, _) = three_steps(st, st.create_session(system_prompt="sys").id)
        judge_step_row(st, s0, [1, 1, 1])
        judge_step_row(st, s1, [-1, -1, 1], hint="run it with -q", enhanced=[1, 2, 7, 7])
        judge_turn(st, turn_id, -1)
    finally:
        st.close()
    seen = []
    config = TrainConfig(batch_size=3, epochs=1, step_reward="outcome", device="cpu", load_in_4bit=False)
    assert train(db, adapters, gguf, "tiny", SHA, config, on_progress=seen.append) == [1]
    assert next(p.metrics for p in seen if p.phase == "step" and p.metrics)["step_reward"] == "outcome"
    st = Store.open(db)
    try:
        v1 = versions.get_version(st, 1)
        assert v1.n_samples == 3 and v1.metrics["step_reward"] == "outcome" and v1.metrics["n_step_samples"] == 2.0
        meta = json.loads((v1.path / "metadata.json").read_text())
        assert meta["config"]["step_reward"] == "outcome"
        assert [(s["step_id"], s["reward"], s["has_teacher"]) for s in meta["samples"]] == [
            (s0, -1.0, False), (s1, -1.0, True), (None, -1.0, False),
        ]  # fmt: skip
        rows = st.db.execute(
            "SELECT step_id, reward, has_hint FROM adapter_samples WHERE version = 1 AND step_id IN (?, ?)", [s0, s1]
        )
        assert sorted(tuple(r) for r in rows) == [(s0, -1.0, 0), (s1, -1.0, 1)]
        assert count_ready(st, SHA, step_reward="outcome") == 0 and count_ready(st, SHA) == 0
    finally:
        st.close()
