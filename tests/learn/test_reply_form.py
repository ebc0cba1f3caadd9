"""The behaviour test's surface features: when two replies to one prompt do the same on an aspect."""

from __future__ import annotations

import pytest

from clawdesk.learn.reply_form import agreement, agrees, has_list, paragraphs, words


def _n_words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n)) + "."


def test_words_drop_punctuation_and_keep_inner_apostrophes():
    assert words("Hi there! Don't use lists — ever, OK?") == ["hi", "there", "don't", "use", "lists", "ever", "ok"]
    assert words("") == [] and words("  ...  ") == []


@pytest.mark.parametrize(
    ("n", "m", "same"),
    [
        (31, 40, True),  # 40 / 31 = 1.29
        (30, 40, False),  # 1.33, and 10 words apart
        (3, 8, True),  # short replies: 5 words apart
        (3, 9, False),
        (0, 0, True),
        (100, 130, True),
        (100, 131, False),
    ],
)
def test_length_agrees_within_a_factor_or_a_few_words(n, m, same):
    assert agrees("length", _n_words(n), _n_words(m)) is same
    assert agrees("length", _n_words(m), _n_words(n)) is same  # symmetric


def test_lists_compare_whether_a_reply_has_list_lines_not_how_many():
    bullets, numbered, prose = "Fruits:\n- apple\n- pear", "Steps:\n1. boil\n2) pour\n3. wait", "Apples and pears."
    assert has_list(bullets) and has_list(numbered) and not has_list(prose)
    assert agrees("lists", bullets, numbered)  # both lists, whatever their length or marker
    assert not agrees("lists", bullets, prose)
    assert agrees("lists", prose, "A dash - inside a sentence, and 3.5 cups, are not list lines.")


def test_paragraphs_are_counted_up_to_several():
    one, two = "One block\nwith a line break.", "First.\n\nSecond."
    three, five = "A.\n\nB.\n \nC.", "A.\n\nB.\n\nC.\n\nD.\n\nE."
    assert [paragraphs(t) for t in (one, two, three, five, "", "\n\n")] == [1, 2, 3, 3, 0, 0]
    assert agrees("paragraphs", three, five) and not agrees("paragraphs", one, two)


def test_opening_and_closing_compare_the_edge_words():
    a = "Hi there! To make tea, boil water first."
    assert agrees("opening", a, "hi there — start with fresh water.")  # case and punctuation do not count
    assert not agrees("opening", a, "To make tea, boil water first.")
    assert agrees("closing", "Boil the water. Hope this helps!", "Steep it well, this helps.")
    assert not agrees("closing", "Boil the water. Hope this helps!", "Boil the water.")


@pytest.mark.parametrize(
    ("served", "own", "direction", "same"),
    [
        (40, 20, "shorter", True),  # without the item the adapter is briefer still: it does what "at most 40" asks
        (40, 40, "shorter", True),
        (20, 40, "shorter", False),  # longer beyond the factor: not learned
        (31, 40, "shorter", True),  # longer, but within the factor
        (40, 20, "longer", False),
        (20, 40, "longer", True),
        (40, 20, None, False),  # no direction: the symmetric rule
    ],
)
def test_a_length_direction_counts_a_reply_past_the_item_as_agreeing(served, own, direction, same):
    assert agrees("length", _n_words(served), _n_words(own), direction) is same


def test_a_direction_is_read_only_on_length_and_must_be_known():
    assert agrees("lists", "- a", "- b", "shorter")  # lists ignore it
    assert agreement("length", [_n_words(40)] * 2, [_n_words(10), _n_words(60)], "shorter") == 1
    with pytest.raises(ValueError, match="direction"):
        agrees("length", "a", "b", "less")


def test_agreement_counts_pairs_and_has_no_feature_for_language_or_tone():
    served = ["Short.", _n_words(60), "Also short."]
    own = ["Brief too.", _n_words(20), _n_words(70)]
    assert agreement("length", served, own) == 1
    assert agreement("language", served, own) is None and agreement(None, served, own) is None
    with pytest.raises(ValueError, match="tone"):
        agrees("tone", "a", "b")
    with pytest.raises(ValueError):
        agreement("length", served, own[:2])  # every served reply has its own-reply pair


@pytest.mark.parametrize(
    ("served", "own", "direction", "same"),
    [
        (20, 38, "shorter", True),  # within "at most 40": it does what the item asks, however far from 20
        (38, 45, "shorter", False),  # past 40: close to 38 no longer counts
        (46, 45, "shorter", True),  # past 40, but no further than the reply with the item went
        (320, 300, "longer", True),  # "at least 300"
        (320, 290, "longer", False),
    ],
)
def test_with_the_items_word_limit_the_limit_decides(served, own, direction, same):
    bound = 40 if direction == "shorter" else 300
    assert agrees("length", _n_words(served), _n_words(own), direction, bound) is same
