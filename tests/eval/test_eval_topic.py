"""The simulated user's first test: does a reply address its request at all (clawdesk.eval.topic)."""

from __future__ import annotations

from clawdesk.eval.memory import oracle_classifier
from clawdesk.eval.topic import OFF_TOPIC_HINT, OFF_TOPIC_MESSAGES, addresses, content_words, off_topic_message


def test_content_words_drop_short_and_stop_words_and_cut_to_five_letters():
    assert content_words("Why is the Sky blue, sky?") == {"sky", "blue"}
    assert content_words("How does computing work?") == {"compu", "work"}
    assert content_words("Explain what you can.") == set()
    assert content_words("What is 15% of 80?") == {"15", "80"}  # a sum is answered in numbers


def test_a_reply_addresses_a_request_when_they_share_a_content_word():
    assert addresses("What is quantum computing?", "A quantum computer uses qubits.")  # inflection: same stem
    assert not addresses("What is quantum computing?", "You can use a few sentences here.")
    assert not addresses("How does a car engine work?", "That's a wall of text. Summarize it in a few lines.")
    assert addresses("What is 15% of 80, and how do you work it out?", "15% of 80 is 0.15 * 80 = 12.")
    assert addresses("Explain it.", "Anything at all.")  # a request with no content word: nothing to share


def test_a_reply_that_only_repeats_the_request_answers_nothing():
    """An echo of the question ends with the "?" a follow-up user wants; it is still no answer."""
    assert not addresses("How can I learn to cook better?", "How can I learn to cook better?")
    assert not addresses("How do I stay motivated to exercise?", "How do you stay motivated to exercise?")
    assert not addresses("How do I learn to draw?", "How do I learn to draw?\n\nHow do you learn to draw?")
    assert addresses("How do I learn to draw?", "Sketch every day. What do you like to draw?")  # one new word is enough
    assert addresses("What is the capital of France?", "Paris is the capital of France.")


def test_the_off_topic_message_cycles_and_its_hint_is_a_one_off_for_the_oracle():
    assert [off_topic_message(i) for i in range(4)] == [*OFF_TOPIC_MESSAGES, OFF_TOPIC_MESSAGES[0]]
    assert oracle_classifier(OFF_TOPIC_HINT, "How do owls hunt?", OFF_TOPIC_MESSAGES[0]) == "one-off"
    assert oracle_classifier("Answer in at most 40 words.", "How do owls hunt?", "Too long.") == "standing"
