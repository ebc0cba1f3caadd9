"""The trainer's view of the base GGUF's vocabulary (llama.cpp ``vocab_only``), on the real demo model."""

from __future__ import annotations

import pytest

from clawdesk.errors import TrainError
from clawdesk.learn.vocab import detokenize, first_turn_ids


def test_detokenize_gives_back_the_text_that_was_tokenized(demo_gguf):
    texts = ["Hi there! Tea needs water at 95 °C.", "- one\n- two\n\nA second paragraph."]
    ids = first_turn_ids(demo_gguf, texts, plain=True)
    assert detokenize(demo_gguf, ids) == texts
    assert detokenize(demo_gguf, [[]]) == [""]


def test_detokenize_leaves_the_end_of_turn_token_out(demo_gguf):
    (prompt,) = first_turn_ids(demo_gguf, ["Hello"])  # a rendered chat turn: special tokens included
    (shown,) = detokenize(demo_gguf, [prompt])
    assert "Hello" in shown and "<|im_start|>" not in shown


def test_an_unreadable_gguf_is_a_train_error_naming_the_file(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf")
    with pytest.raises(TrainError, match=r"broken\.gguf"):
        detokenize(bad, [[1, 2]])
