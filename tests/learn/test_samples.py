"""Sample selection from the real SQLite log, and the adapter-version records that spend samples."""

from __future__ import annotations

import pytest

from clawdesk.errors import NotFoundError, TrainError
from clawdesk.learn import versions
from clawdesk.learn.samples import count_ready, heldout_replies, ready_samples
from clawdesk.store import NewTurn, Store, now_iso
from clawdesk.store.judgments import Judgment, save_judgment, set_rating, set_veto

SHA = "base-sha"


@pytest.fixture
def st(tmp_path):
    store = Store.open(tmp_path / "clawdesk.db")
    yield store
    store.close()


@pytest.fixture
def session(st):
    return st.create_session(system_prompt="sys")


def add_turn(st, session_id, *, sha=SHA, prompt=(1, 2, 3), reply=(4, 5), status="finished") -> int:
    at = now_iso()
    turn = NewTurn(
        user_content="question", reply_content="answer", reply_thinking="", status=status, thinking=False,
        model_name="base", model_path="/m.gguf", model_sha256=sha, prompt_ids=list(prompt), reply_ids=list(reply),
        started_at=at, finished_at=at,
    )  # fmt: skip
    return st.add_turn(session_id, turn)


def judge(st, turn_id, reward, hint=None, enhanced=None) -> None:
    save_judgment(
        st,
        Judgment(
            turn_id=turn_id, next_turn_id=turn_id, prompt_version="v1", judge_model_name="judge",
            judge_model_sha256="judge-sha", score_outputs=["\\boxed{1}"], votes=[reward], reward=reward,
            hint_outputs=[], hint=hint, enhanced_user=None, enhanced_prompt_ids=enhanced, seconds=0.1,
        ),
    )  # fmt: skip


def judged(st, session_id, reward, **kw) -> int:
    hint, enhanced = kw.pop("hint", None), kw.pop("enhanced", None)
    tid = add_turn(st, session_id, **kw)
    judge(st, tid, reward, hint, enhanced)
    return tid


def ids_of(st, sha=SHA) -> list[int]:
    return [s.turn_id for s in ready_samples(st, sha)]


def test_reward_and_hint_rules(st, session):
    plus = judged(st, session.id, 1, prompt=(7, 8, 9), reply=(10, 11, 12))
    minus = judged(st, session.id, -1)
    judged(st, session.id, 0)  # no reward, no hint: nothing to learn
    hinted = judged(st, session.id, 0, hint="Mention the source.", enhanced=[1, 2, 3, 99, 98])
    judged(st, session.id, 0, hint="Hint but no teacher tokens")  # no OPD without the enhanced prompt
    plus_bare_hint = judged(st, session.id, 1, hint="Hint without tokens")

    samples = {s.turn_id: s for s in ready_samples(st, SHA)}
    assert list(samples) == [plus, minus, hinted, plus_bare_hint]  # oldest first
    assert samples[plus].prompt_ids == [7, 8, 9] and samples[plus].reply_ids == [10, 11, 12]
    assert (samples[plus].reward, samples[minus].reward, samples[hinted].reward) == (1.0, -1.0, 0.0)
    assert samples[hinted].has_hint and samples[hinted].teacher_prompt_ids == [1, 2, 3, 99, 98]
    assert samples[hinted].hint == "Mention the source."
    assert not samples[plus_bare_hint].has_hint and samples[plus_bare_hint].hint == "Hint without tokens"
    assert samples[plus_bare_hint].teacher_prompt_ids is None
    assert count_ready(st, SHA) == 4
    assert [s.turn_id for s in ready_samples(st, SHA, limit=2)] == [plus, minus]


def test_explicit_rating_overrides_judge_reward(st, session):
    up = judged(st, session.id, -1)
    down = judged(st, session.id, 0)
    cleared = judged(st, session.id, 1)
    set_rating(st, up, 1)
    set_rating(st, down, -1)
    set_rating(st, cleared, 1)
    set_rating(st, cleared, None)  # clearing the thumbs falls back to the judge
    assert {s.turn_id: s.reward for s in ready_samples(st, SHA)} == {up: 1.0, down: -1.0, cleared: 1.0}


def test_veto_incognito_learning_off_other_base_and_unjudged_give_nothing(st, session):
    vetoed = judged(st, session.id, 1)
    set_veto(st, vetoed)
    secret = st.create_session(system_prompt="sys", incognito=True)
    judged(st, secret.id, 1)
    judged(st, session.id, 1, sha="other-base")
    add_turn(st, session.id)  # never judged
    dropped = add_turn(st, session.id)
    st.db.execute(
        "INSERT INTO judgments(step_id, next_state, status, judged_at) SELECT id, 'user', 'dropped', ? FROM steps"
        " WHERE turn_id = ?",
        [now_iso(), dropped],
    )
    judged(st, session.id, 1, reply=())  # nothing to score
    st.set_learning(False)
    judged(st, session.id, 1)
    st.set_learning(True)
    kept = judged(st, session.id, 1)

    assert ids_of(st) == [kept]
    assert count_ready(st, SHA) == 1
    assert ids_of(st, "other-base") != []  # that turn is ready for its own base
    set_veto(st, vetoed, False)
    assert ids_of(st) == [vetoed, kept]


def _record(st, tmp_path, version, samples, status="ready", sha=SHA) -> versions.AdapterVersion:
    return versions.record_version(
        st, version=version, status=status, parent_version=None, base_name="base", base_sha256=sha,
        path=tmp_path / f"v{version}", samples=samples, metrics={"loss": 0.5}, validation={"passed": status == "ready"},
        note="" if status == "ready" else "held-out log-prob fell", created_at=now_iso(),
    )  # fmt: skip


def test_a_turn_is_trained_on_once_even_by_a_rejected_version(st, session, tmp_path):
    a, b, c = (judged(st, session.id, 1) for _ in range(3))
    first = ready_samples(st, SHA, limit=1)
    v1 = _record(st, tmp_path, 1, first)
    assert ids_of(st) == [b, c]
    assert versions.version_samples(st, 1) == [{"turn_id": a, "reward": 1.0, "has_hint": False}]
    _record(st, tmp_path, 2, ready_samples(st, SHA, limit=1), status="rejected")
    assert ids_of(st) == [c]
    assert count_ready(st, SHA) == 1
    with pytest.raises(TrainError):  # the UNIQUE turn_id refuses a second use
        _record(st, tmp_path, 3, first)
    assert [v.version for v in versions.list_versions(st)] == [1, 2]  # the failed insert left nothing
    assert v1.ready and v1.metrics == {"loss": 0.5} and v1.gguf_path == tmp_path / "v1" / "adapter.gguf"


def test_latest_ready_skips_rejected_and_other_bases(st, session, tmp_path):
    assert versions.latest_ready(st, SHA) is None
    tids = [judged(st, session.id, 1) for _ in range(4)]
    samples = {s.turn_id: s for s in ready_samples(st, SHA)}
    _record(st, tmp_path, 1, [samples[tids[0]]])
    _record(st, tmp_path, 2, [samples[tids[1]]], status="rejected")
    _record(st, tmp_path, 3, [samples[tids[2]]], sha="other-base")
    assert versions.latest_ready(st, SHA).version == 1
    assert versions.latest_ready(st, "other-base").version == 3
    assert [v.version for v in versions.list_versions(st, SHA)] == [1, 2]
    assert versions.get_version(st, 2).status == "rejected"
    with pytest.raises(NotFoundError):
        versions.get_version(st, 9)


def test_next_version_skips_dirs_left_on_disk(st, session, tmp_path):
    adapters = tmp_path / "adapters"
    assert versions.next_version(st, adapters) == 1
    (adapters / "v4").mkdir(parents=True)
    (adapters / ".staging-v7").mkdir()  # staging dirs never count
    assert versions.next_version(st, adapters) == 5


def test_heldout_replies_are_earlier_non_negative_learnable_turns(st, session):
    old = [add_turn(st, session.id, reply=(i + 1,)) for i in range(3)]  # unjudged replies count
    bad = judged(st, session.id, -1)
    good = judged(st, session.id, 1)
    judged(st, session.id, 1, sha="other-base")
    add_turn(st, session.id, status="cancelled")
    secret = st.create_session(system_prompt="sys", incognito=True)
    add_turn(st, secret.id)
    rated_up = judged(st, session.id, -1)
    set_rating(st, rated_up, 1)

    held = heldout_replies(st, SHA, exclude={good})
    assert [s.turn_id for s in held] == [rated_up, old[2], old[1], old[0]]  # newest first
    assert bad not in {s.turn_id for s in held}
    assert all(s.hint is None and not s.has_hint for s in held)
    assert held[1].reply_ids == [3]
    assert [s.turn_id for s in heldout_replies(st, SHA, exclude=set(), n=2)] == [rated_up, good]
