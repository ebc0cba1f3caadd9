"""When a reply repeats itself (clawdesk.engine.repeats): exact periods, spans and the off switch."""

from clawdesk.engine.repeats import repeat_period


def test_a_short_unit_repeats_once_it_fills_the_window():
    loop = [7, 8, 9] * 30  # period 3
    head = [1, 2, 3, 4]
    assert repeat_period(head + loop[:64], 64) == 3  # the last 64 ids: each after the first 3 equals the one 3 before
    assert repeat_period(head + loop[:63], 64) == 0  # the window reaches back into the head


def test_the_smallest_period_is_reported():
    assert repeat_period([5] * 80, 64) == 1
    assert repeat_period([5, 6] * 40, 64) == 2  # also periodic with 4, 6, …


def test_a_long_passage_repeats_when_written_twice():
    passage = list(range(100, 140))  # 40 tokens: longer than window / 2, so two copies are needed, not 64 tokens
    assert repeat_period([1, *passage, *passage], 64) == 40
    assert repeat_period([1, *passage, *passage[:-1]], 64) == 0
    assert repeat_period(passage + passage, 64, max_period=39) == 0  # longer than looked for


def test_text_that_goes_on_is_not_a_loop():
    counting = [t for n in range(1, 60) for t in (n, 1000)]  # "1, 2, 3, …": a pattern, not a repetition
    assert repeat_period(counting, 64) == 0
    almost = [5, 6] * 40
    almost[-10] = 9  # one id off inside the window
    assert repeat_period(almost, 64) == 0


def _first_loop(ids: list[int], window: int, resumed: list[int] | None = None) -> tuple[int, int] | None:
    """(tokens written, period) where a reply written token by token first loops, as the engine checks it."""
    reply = list(resumed or [])
    for k, tok in enumerate(ids, 1):
        reply.append(tok)
        if period := repeat_period(reply, window):
            return k, period
    return None


def test_the_check_fires_at_the_first_looping_token_and_not_when_off():
    ids = [1, 2, 3] + [4, 5] * 60
    assert _first_loop(ids, 64) == (3 + 64, 2)
    assert _first_loop(ids, 0) is None


def test_a_resumed_reply_counts_its_earlier_tokens():
    assert _first_loop([5], 16, resumed=[4, 5] * 7 + [4]) == (1, 2)  # 15 tokens so far, then the 16th
