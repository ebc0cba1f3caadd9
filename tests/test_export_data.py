"""``clawdesk export-data`` read back by the tool it is for: Hugging Face ``datasets``, as TRL loads it.

The README promises "judged samples as TRL-ready JSONL (no incognito/vetoed turns)". TRL's KTO
trainer reads unpaired preference data as conversational ``prompt`` / ``completion`` / ``label``;
the SFT trainer reads ``prompt`` / ``completion``. A real SQLite log is filled with judged turns of
every kind (plain, hinted, thumbs-overridden, vetoed, incognito, recorded with learning OFF, not
yet judged), exported through the CLI, and loaded with ``datasets.load_dataset("json", …)``.
"""

from __future__ import annotations

import json

import pytest

from clawdesk.cli import main
from clawdesk.store import NewTurn, Store, now_iso
from clawdesk.store.judgments import Judgment, save_judgment, set_rating, set_veto


def _turn(store: Store, session_id: int, text: str) -> int:
    at = now_iso()
    turn = NewTurn(
        user_content=f"user: {text}", reply_content=f"assistant: {text}", reply_thinking="", status="finished",
        thinking=False, model_name="m", model_path="/m.gguf", model_sha256="sha", prompt_ids=[1, 2], reply_ids=[3],
        started_at=at, finished_at=at,
    )  # fmt: skip
    return store.add_turn(session_id, turn)


def _judge(store: Store, turn_id: int, reward: int, hint: str | None = None) -> None:
    save_judgment(
        store,
        Judgment(
            turn_id=turn_id, next_turn_id=turn_id, prompt_version="t", judge_model_name="j", judge_model_sha256="j",
            score_outputs=[], votes=[], reward=reward, hint_outputs=[], hint=hint, enhanced_user=None,
            enhanced_prompt_ids=[1, 2, 9] if hint else None, seconds=0.0,
        ),
    )  # fmt: skip


@pytest.fixture
def log(home):
    """A log with one turn of every kind; returns {name: turn_id}."""
    store = Store.open(home / "clawdesk.db")
    try:
        chat = store.create_session(system_prompt="Be helpful.")
        t = {name: _turn(store, chat.id, name) for name in ("liked", "hinted", "vetoed", "thumbed")}
        _judge(store, t["liked"], 1)
        _judge(store, t["hinted"], -1, hint="Answer in one sentence.")
        _judge(store, t["vetoed"], 1)
        set_veto(store, t["vetoed"])
        _judge(store, t["thumbed"], -1)
        set_rating(store, t["thumbed"], 1)  # the person's thumbs up overrides the judge
        t["unclear"] = _turn(store, chat.id, "unclear")
        _judge(store, t["unclear"], 0)  # no label: neither desirable nor undesirable for KTO
        t["pending"] = _turn(store, chat.id, "pending")  # recorded, never judged
        secret = store.create_session(system_prompt="Be helpful.", incognito=True)
        t["incognito"] = _turn(store, secret.id, "incognito")
        _judge(store, t["incognito"], 1)  # even if a judgment existed, an incognito turn never leaves
        store.set_learning(False)
        off = store.create_session(system_prompt="Be helpful.")
        t["off"] = _turn(store, off.id, "off")
        _judge(store, t["off"], 1)
        store.set_learning(True)
        return t
    finally:
        store.close()


def _export(capsys, tmp_path):
    out = tmp_path / "export" / "samples.jsonl"
    code = main(["export-data", "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    return out, stdout


def test_export_loads_with_datasets_as_trl_reads_it(home, log, capsys, tmp_path):
    from datasets import load_dataset

    out, stdout = _export(capsys, tmp_path)
    assert "wrote 3 judged sample(s)" in stdout
    ds = load_dataset("json", data_files=str(out), split="train", cache_dir=str(tmp_path / "hf-cache"))

    assert ds.num_rows == 3
    assert {"prompt", "completion", "label"} <= set(ds.column_names)  # KTO; prompt + completion alone for SFT
    assert ds.features["label"].dtype == "bool"
    rows = {r["turn_id"]: r for r in ds}
    # no vetoed, unclear, incognito, OFF or pending turn
    assert set(rows) == {log["liked"], log["hinted"], log["thumbed"]}

    for row in ds:  # TRL's is_conversational(): a list of {"role", "content"} messages
        msgs = row["prompt"] + row["completion"]
        assert all(set(m) == {"role", "content"} and isinstance(m["content"], str) for m in msgs)
        assert row["prompt"][0] == {"role": "system", "content": "Be helpful."}
        roles = [m["role"] for m in msgs[1:]]
        assert roles == ["user", "assistant"] * (len(roles) // 2)  # alternating, ends with the reply
        assert row["completion"] == [{"role": "assistant", "content": row["completion"][0]["content"]}]
        assert row["label"] == (row["reward"] > 0)

    liked, hinted, thumbed = rows[log["liked"]], rows[log["hinted"]], rows[log["thumbed"]]
    assert liked["prompt"][1:] == [{"role": "user", "content": "user: liked"}]
    assert liked["completion"][0]["content"] == "assistant: liked"
    assert liked["label"] is True and liked["hint"] is None
    assert hinted["label"] is False and hinted["hint"] == "Answer in one sentence."
    # Earlier turns of the session are the conversation so far, the vetoed one included: it was said.
    assert [m["content"] for m in thumbed["prompt"][1:]] == [
        "user: liked", "assistant: liked", "user: hinted", "assistant: hinted",
        "user: vetoed", "assistant: vetoed", "user: thumbed",
    ]  # fmt: skip
    assert thumbed["reward"] == 1 and thumbed["label"] is True  # the thumbs up, not the judge's -1


def test_vetoing_after_an_export_drops_the_turn_from_the_next(home, log, capsys, tmp_path):
    out, _ = _export(capsys, tmp_path)
    assert log["liked"] in [json.loads(line)["turn_id"] for line in out.read_text().splitlines()]
    store = Store.open(home / "clawdesk.db")
    try:
        set_veto(store, log["liked"])
    finally:
        store.close()
    out, stdout = _export(capsys, tmp_path)
    ids = [json.loads(line)["turn_id"] for line in out.read_text().splitlines()]
    assert sorted(ids) == sorted([log["hinted"], log["thumbed"]]) and "wrote 2" in stdout
    assert not out.with_suffix(".jsonl.tmp").exists()
