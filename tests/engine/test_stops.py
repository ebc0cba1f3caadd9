"""Stop strings: the reply ends before one, its ids and text cut on a token boundary, nothing shown taken back."""

from clawdesk.engine import SamplingParams
from clawdesk.engine.stops import StopCut, held_tail
from clawdesk.preferences import ECHO_STOPS, USER_MEMORY_HEADER


def feed(stops, pieces):
    cut = StopCut(stops)
    shown, hit = [], False
    for piece in pieces:
        out, hit = cut.add(piece)
        shown.append(out)
        if hit:
            break
    shown.append(cut.flush())
    return cut, "".join(shown), hit


def test_held_tail_is_the_longest_proper_prefix_at_the_end():
    assert held_tail("Hi there!\n\n[use", ["[user's hint"]) == 4
    assert held_tail("Hi there!", ["[user's hint"]) == 0
    assert held_tail("a [", ["[user's hint", "[x"]) == 1
    assert held_tail("[user's hint", ["[user's hint"]) == 0  # the whole string is a match, not a prefix


def test_cut_drops_the_token_that_starts_the_stop_string():
    # "!\n\n[" holds the end of the answer and the stop's first character: it goes with the stop,
    # so the kept ids decode to exactly the text that was shown.
    cut, shown, hit = feed(ECHO_STOPS, ["Hi", " there", "!\n\n[", "user", "'s", " hint", " / more"])
    assert hit and cut.kept == 2 and cut.text == "Hi there" and shown == "Hi there"


def test_text_that_only_looks_like_a_stop_is_shown_in_full():
    pieces = ["Use", " [", "user", "'s", " notes]", " here", " [use"]
    cut, shown, hit = feed(ECHO_STOPS, pieces)
    assert not hit and cut.kept is None and shown == "".join(pieces)


def test_shown_text_is_always_a_prefix_of_the_final_reply():
    pieces = ["A", "b [", "us", "er's", " hi", "nt x"]
    cut = StopCut(ECHO_STOPS)
    shown = ""
    for piece in pieces:
        out, hit = cut.add(piece)
        shown += out
        assert cut.text.startswith(shown)
        if hit:
            break
    assert hit and shown == cut.text == "A"  # "b [" held the stop's start


def test_a_thought_that_quotes_the_header_is_not_cut_the_answer_after_it_is():
    pieces = ["<think>", "\nThe", " [user's", " hint", " /", " instruction]", " says", " brief.", "\n</think>"]
    pieces += ["\n\nParis", ".", "\n\n[", "user's", " hint"]
    cut, shown, hit = feed(ECHO_STOPS, pieces)
    assert hit and shown == cut.text == "".join(pieces[:11])  # the thought whole, the answer before the header
    thought = ["<think>", "\nquoting [user's", " hint"]  # still thinking when the reply ended (length)
    cut, shown, hit = feed(ECHO_STOPS, thought)
    assert not hit and shown == "".join(thought)


def test_no_stops_shows_every_piece_at_once():
    cut = StopCut(())
    assert [cut.add(p) for p in ["a", "[", "b"]] == [("a", False), ("[", False), ("b", False)]


def test_echo_stop_is_the_memory_header_the_model_copies():
    assert USER_MEMORY_HEADER.strip().startswith(ECHO_STOPS[0])


def test_engine_cuts_at_a_stop_string_the_model_writes(engine):
    prompt = engine.build_prompt("", [], "Write three sentences about cats.", thinking=False, reply_room=64)
    greedy = SamplingParams(temperature=0.0, max_tokens=40)
    engine.reset_cache()
    full = engine.generate(prompt.token_ids, greedy)
    words = full.content.split()
    assert len(words) > 8, full.content
    stop = " ".join(words[4:6])  # two words in the middle of what it writes anyway
    pieces = []
    engine.reset_cache()
    cut = engine.generate(
        prompt.token_ids,
        SamplingParams(temperature=0.0, max_tokens=40, stop=(stop,)),
        on_delta=lambda d: pieces.append(d.text),
    )
    at = full.raw_text.find(stop)
    assert cut.status == "finished" and stop not in cut.raw_text
    assert full.raw_text.startswith(cut.raw_text) and len(cut.raw_text) <= at
    assert at - len(cut.raw_text) < 12  # at most the stop's first token's text is dropped with it
    # the served ids are the greedy ids up to the cut, and decode to the text streamed and recorded
    assert cut.reply_ids == full.reply_ids[: len(cut.reply_ids)]
    assert engine.llm.detokenize(cut.reply_ids, special=False).decode() == cut.raw_text == "".join(pieces)


def test_a_stop_never_written_changes_nothing(engine):
    prompt = engine.build_prompt("", [], "Name a colour.", thinking=False, reply_room=64)
    greedy = SamplingParams(temperature=0.0, max_tokens=24)
    engine.reset_cache()
    plain = engine.generate(prompt.token_ids, greedy)
    engine.reset_cache()
    stopped = engine.generate(prompt.token_ids, SamplingParams(temperature=0.0, max_tokens=24, stop=ECHO_STOPS))
    assert (stopped.reply_ids, stopped.raw_text, stopped.status) == (plain.reply_ids, plain.raw_text, plain.status)
