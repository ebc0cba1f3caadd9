"""The eval's judges as the learning loop calls them: the oracle, the ``shuffled`` and ``opd`` controls and the
agreement observer give exactly the rewards and hints the method says, and that is what the loop saves.

Real SmolLM2 engine (the teacher prompt is rendered with it), real SQLite, the real loop in synchronous mode.
"""

from __future__ import annotations

from collections import Counter

from clawdesk.config import Config
from clawdesk.engine.gate import ChatGate
from clawdesk.eval.judges import ObservedJudge, OracleJudge, ShuffledJudge, ZeroRewardJudge, shuffle_signals
from clawdesk.runtime import build_learning_loop, open_store
from clawdesk.store.judgments import list_judged
from clawdesk.testing.judged_log import fill_judged

HINT = "Answer in one short sentence."


def truth(turn_id: int) -> tuple[bool, str | None]:
    """The simulated user: every third turn satisfied; the others get the persona's hint."""
    return turn_id % 3 == 0, HINT


def judged_by(make_judge, home, engine) -> tuple[list[int], list[tuple[int, int, str | None]]]:
    """Eight pending turns judged by the loop with ``make_judge(engine)``: (their ids, (turn, reward, hint) saved)."""
    config = Config(home=home)
    store = open_store(config)
    ids = fill_judged(config.db_path, 9, seed=0, vocab=100, sha=engine.identity.sha256, judged=False)[:-1]
    loop = build_learning_loop(config, store, engine, gate=ChatGate(), judge=make_judge(engine), synchronous=True)
    try:
        loop.start()
        assert loop.judge_pending() == len(ids)
        saved = sorted((j.turn_id, j.reward, j.hint) for j in list_judged(store))
    finally:
        loop.close()
        store.close()
    return ids, saved


def test_the_oracle_rewards_the_checks_and_hints_the_first_failing_persona(engine, tmp_path):
    ids, saved = judged_by(lambda e: OracleJudge(e, truth), tmp_path / "oracle", engine)
    assert saved == [(t, 1, None) if t % 3 == 0 else (t, -1, HINT) for t in ids]
    assert Counter(r for _, r, _ in saved) == {1: 2, -1: 6}


def test_opd_saves_reward_0_and_keeps_the_hints(engine, tmp_path):
    ids, saved = judged_by(lambda e: ZeroRewardJudge(OracleJudge(e, truth)), tmp_path / "opd", engine)
    assert saved == [(t, 0, None) if t % 3 == 0 else (t, 0, HINT) for t in ids]


def test_shuffled_permutes_the_rounds_signals_and_keeps_their_multiset(engine, tmp_path):
    def shuffled(e):
        return ShuffledJudge(OracleJudge(e, truth), seed=1, salt=lambda: 8)

    ids, saved = judged_by(shuffled, tmp_path / "shuffled", engine)
    signals = [(1, None) if t % 3 == 0 else (-1, HINT) for t in ids]
    expected = shuffle_signals(signals, 1, 8)
    assert [(r, h) for _, r, h in saved] == expected
    assert Counter(expected) == Counter(signals) and expected != signals  # permuted, not changed


def test_agreement_sees_the_judges_own_reward_before_the_opd_control(engine, tmp_path):
    seen: list[tuple[int, int]] = []

    def observed(e):
        return ZeroRewardJudge(ObservedJudge(OracleJudge(e, truth), lambda p, j: seen.append((p.turn.id, j.reward))))

    ids, saved = judged_by(observed, tmp_path / "observed", engine)
    assert seen == [(t, 1 if t % 3 == 0 else -1) for t in ids]  # oldest first, as the loop judges
    assert {r for _, r, _ in saved} == {0}
