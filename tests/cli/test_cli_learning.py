"""The learning commands as a person runs them: ask → judge → train → adapters → export, on SmolLM2."""

import json

import pytest

from clawdesk.cli import main
from clawdesk.store import Store


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _db(home):
    return Store.open(home / "clawdesk.db")


@pytest.mark.slow
def test_learning_loop_from_the_cli(home, capsys, tmp_path):
    assert run(capsys, "ask", "Name a colour.")[0] == 0
    assert run(capsys, "ask", "-c", "Thanks! Name another one.")[0] == 0
    code, out, _ = run(capsys, "ask", "--rate", "+1")  # thumbs up for the last reply
    assert code == 0 and "rated turn 2" in out
    assert run(capsys, "ask", "-c", "Great, and a third?")[0] == 0
    assert run(capsys, "ask", "--incognito", "A private question.")[0] == 0
    assert run(capsys, "ask", "-c", "And a private follow-up.")[0] == 0

    code, out, err = run(capsys, "judge")
    assert code == 0, err
    assert "judged 2 turn(s)" in out  # turns 1 and 2; the incognito chat and the last turns are not judged
    st = _db(home)
    try:
        assert st.db.execute("select count(*) from judgments where status = 'judged'").fetchone()[0] == 2
    finally:
        st.close()

    code, out, err = run(capsys, "train", "--batch-size", "1", "--steps", "1")
    assert code == 0, err
    assert "v1: ready" in out and "the chat now serves v1" in out
    code, out, _ = run(capsys, "adapters")
    assert "* v1" in out and "serving: v1" in out

    # A new turn is served with the adapter and records its version.
    assert run(capsys, "ask", "Hello again")[0] == 0
    st = _db(home)
    try:
        assert st.list_turns(st.latest_session().id)[-1].adapter_version == 1
    finally:
        st.close()

    code, out, _ = run(capsys, "adapters", "rollback")
    assert "serving: base model" in out
    code, out, _ = run(capsys, "adapters", "use", "1")
    assert "serving: v1" in out
    code, _, err = run(capsys, "adapters", "use", "7")
    assert code != 0 and "no adapter version v7" in err

    for fmt in ("peft", "gguf", "ollama"):
        out_dir = tmp_path / f"export-{fmt}"
        code, _, err = run(capsys, "export", "--format", fmt, "--out", str(out_dir))
        assert code == 0, err
        readme = (out_dir / "README.md").read_text()
        assert "smollm2-135m" in readme and "samples used: 1" in readme
    assert (tmp_path / "export-peft" / "adapter_model.safetensors").is_file()
    modelfile = (tmp_path / "export-ollama" / "Modelfile").read_text()
    assert modelfile.startswith("FROM /") and "SmolLM2-135M-Instruct.Q4_1.gguf" in modelfile
    assert "ADAPTER ./adapter.gguf" in modelfile

    # The exported GGUF LoRA loads in llama.cpp on the base it names.
    import llama_cpp

    base = modelfile.split("\n")[0].removeprefix("FROM ")
    llm = llama_cpp.Llama(
        model_path=base, lora_path=str(tmp_path / "export-gguf" / "adapter.gguf"), n_ctx=64, verbose=False
    )
    llm.close()

    data = tmp_path / "data.jsonl"
    code, out, _ = run(capsys, "export-data", "--out", str(data))
    assert code == 0 and "wrote 2 judged sample(s)" in out
    records = [json.loads(line) for line in data.read_text().splitlines()]
    assert [r["turn_id"] for r in records] == [1, 2]
    assert records[1]["reward"] == 1 and records[1]["label"] is True
    assert records[1]["prompt"][-1] == {"role": "user", "content": "Thanks! Name another one."}
    assert records[1]["prompt"][1] == {"role": "user", "content": "Name a colour."}
    assert all("A private question" not in json.dumps(r) for r in records)  # incognito stays out


@pytest.mark.slow
def test_exported_peft_folder_loads_on_the_base(home, capsys, tmp_path, demo_gguf):
    """`export --format peft` gives a folder PeftModel.from_pretrained accepts on the same base."""
    from clawdesk.learn.base_model import load_base

    assert run(capsys, "ask", "Pick a number.")[0] == 0
    assert run(capsys, "ask", "-c", "Perfect, thanks.")[0] == 0
    st = _db(home)
    try:
        from clawdesk.store.judgments import set_rating

        set_rating(st, 1, 1)
    finally:
        st.close()
    assert run(capsys, "judge")[0] == 0
    assert run(capsys, "train", "--batch-size", "1")[0] == 0
    out_dir = tmp_path / "peft"
    assert run(capsys, "export", "--format", "peft", "--out", str(out_dir), "--version", "1")[0] == 0
    from peft import PeftModel

    model, _ = load_base(demo_gguf, device="cpu", load_in_4bit=False)
    tuned = PeftModel.from_pretrained(model, str(out_dir))
    assert any("lora_B" in name for name, _ in tuned.named_parameters())


def test_learning_commands_respect_the_switch_and_empty_state(home, capsys):
    assert run(capsys, "learning", "off")[0] == 0
    code, out, _ = run(capsys, "judge")
    assert code == 0 and "learning is OFF" in out
    code, out, _ = run(capsys, "train")
    assert code == 0 and "learning is OFF" in out
    run(capsys, "learning", "on")
    code, out, _ = run(capsys, "judge")
    assert code == 0 and "Nothing to judge" in out
    code, out, _ = run(capsys, "adapters")
    assert code == 0 and "No adapter versions yet" in out
    code, _, err = run(capsys, "export", "--out", str(home / "x"))
    assert code != 0 and "no trained adapter yet" in err
    code, _, err = run(capsys, "ask", "--rate", "+1")
    assert code != 0 and "no turn to rate" in err
    code, _, err = run(capsys, "ask", "--rate", "+1", "some text")
    assert code != 0 and "without a message" in err
