"""The same-topic rule: the aspect lexicon on the labelled sets, its tie-break and fallback, and the store using it.

Pure text, plus a real SQLite store for the replacement; the labelled sets are the ones
``bench/pref_topics.py`` prints (docs/learning.md, "Merging items by aspect").
"""

from __future__ import annotations

from clawdesk.store.pref_topics import (
    ASPECTS,
    aspect,
    aspect_counts,
    length_bound,
    length_direction,
    same_topic,
    same_words,
)
from clawdesk.store.prefs import active_preferences, add_preference, list_preferences
from tests.support.bench import load_bench


def _bench():
    return load_bench("pref_topics")


def test_every_message_and_hint_of_the_single_aspect_personas_gets_its_aspect():
    rows = _bench().persona_rows()
    assert len(rows) == 60
    wrong = [(label, aspect(text), text) for text, label in rows if aspect(text) != label]
    assert wrong == []


def test_on_the_held_out_set_the_lexicon_beats_the_word_rule_as_measured():
    bench = _bench()
    rows = bench.heldout_rows()
    assert len(rows) == 84 and {label for _, label in rows} == set(ASPECTS)
    right = sum(aspect(text) == label for text, label in rows)
    assert right / len(rows) >= 0.85  # measured 73/84 = 0.87 before any change to the lexicon after seeing it
    by_aspect = bench.pair_counts(rows, same_topic)
    by_words = bench.pair_counts(rows, same_words)
    assert by_aspect["tp"] / (by_aspect["tp"] + by_aspect["fp"]) >= 0.85  # 0.90: few wrong replacements
    assert by_aspect["tp"] / (by_aspect["tp"] + by_aspect["fn"]) >= 0.7  # 0.76 of the same-aspect pairs merge
    assert by_words["tp"] / (by_words["tp"] + by_words["fn"]) < 0.05  # the word rule alone: 2 of 462


# The held-out length wishes that ask for *more*; the other nine ask for less. These direction labels were
# added by us after the set was written (its author labelled aspects only), so they show coverage.
ASKS_FOR_MORE = ("longer, more thorough", "Expand on things more", "too brief to be useful")


def test_a_length_wish_says_which_way_it_points():
    rows = [text for text, label in _bench().heldout_rows() if label == "length"]
    assert len(rows) == 12
    want = ["longer" if any(k in text for k in ASKS_FOR_MORE) else "shorter" for text in rows]
    assert [length_direction(text) for text in rows] == want
    brief = [text for text, label in _bench().persona_rows() if label == "length"]
    assert brief and {length_direction(text) for text in brief} == {"shorter"}
    # The phrases whose length word says the opposite of the wish, and no cue at all.
    assert length_direction("No longer than 50 words, please.") == "shorter"
    assert length_direction("That was too short, go deeper.") == "longer"
    assert length_direction("Write at least five sentences.") == "longer"
    assert length_direction("Start with 'Keep it brief'.") is None  # quoted: what to say, not the wish
    assert length_direction("Use British spelling.") is None


def test_a_length_wish_s_word_limit_is_read_in_its_direction():
    # The persona's hint and the self judge's brevity items of a `brief` run (runs of stop 47), then the edges.
    assert length_bound("Answer in at most 40 words, giving only the essential point.") == 40
    assert length_bound("I don't need an essay, keep it under 40 words.") == 39
    assert length_bound("Please be brief: forty words or fewer.") == 40
    assert length_bound("Cut it down to a couple of sentences at most.") is None  # sentences: no word count
    assert length_bound("No longer than 50 words, please.") == 50
    assert length_bound("Write at least 300 words.") == 300 and length_bound("Use more than 99 words.") == 100
    assert length_bound("Start with 'at most 40 words'.") is None  # quoted: what to say
    assert length_bound("Use at most 3 emojis, keep it short.") is None  # a count, but not of words


def test_quoted_text_is_what_to_say_not_what_the_wish_is_about():
    assert aspect("Start with 'Short answer:' please.") == "opening"
    assert aspect_counts("Begin with 'No bullet lists, be brief'.") == {"opening": 1}
    assert aspect("Open with \u201cThe short version\u201d.") == "opening"
    assert aspect_counts("Don't begin with 'Short answer:'.") == {"opening": 1}  # an apostrophe opens no quote


def test_the_aspect_with_most_cues_wins_and_a_tie_goes_to_the_more_specific():
    assert aspect_counts("Please don't use lists. Write it as a short paragraph.") == {
        "lists": 1,
        "paragraphs": 1,
        "length": 1,
    }
    assert aspect("Please don't use lists. Write it as a short paragraph.") == "lists"  # tie: lists before length
    assert aspect("That's a wall of text. Summarize it in a few lines.") == "length"  # 2 length cues, 1 paragraphs
    assert aspect("Give me separate paragraphs, not one wall of text.") == "paragraphs"
    assert aspect("End with a short question back to me.") == "closing"


def test_text_without_a_cue_has_no_aspect_and_falls_back_on_shared_words():
    assert aspect("Always give distances in kilometres.") is None
    assert same_topic("Always give distances in kilometres.", "Give distances in kilometres and metres.")
    # One side has an aspect, the other none: the word rule decides (here: nothing shared).
    assert not same_topic("Be brief.", "Always give distances in kilometres.")


def test_six_brevity_complaints_in_six_wordings_leave_one_item(store):
    # The self-judged add-no-lists run on the word rule kept all six as separate items (docs/learning.md).
    said = [
        "I don't need an essay, keep it under 40 words.",
        "Way too much detail. Just the short version, please.",
        "Cut it down to a couple of sentences at most.",
        "That's a wall of text. Summarize it in a few lines.",
        "Please be brief: forty words or fewer.",
        "Shorter, please. One short paragraph, nothing more.",
    ]
    for text in said:
        add_preference(store, text)
    lists = add_preference(store, "Please don't use lists. Write it as a short paragraph.").item
    assert [p.text for p in active_preferences(store)] == [lists.text, said[-1]]
    removed = [p for p in list_preferences(store) if p.status == "removed"]
    assert len(removed) == 5 and all(p.replaced_by is not None for p in removed)
