"""The learned check: whether the adapter carries a preference item, so the item can leave the prompt.

Training distils the memory into the weights (the student learns each turn in its prompt without the
items, the teacher reads it with them: :mod:`clawdesk.store.samples`). After a version is made and
passes validation, the trainer asks, for every active or learned item, on up to :data:`CHECK_TURNS`
recent turns whose prompt held it (fewest items first, :func:`~clawdesk.store.turn_memory.item_turns`),
the first :data:`CHECK_TOKENS` tokens of each served reply (served *with* the item):

- ``teacher``: their log-probs under the base with the items in the prompt (the OPD teacher);
- ``adapter``: under the new adapter with the items removed (the student, as it would now serve);
- ``base``: under the base with the items removed (what the item was worth before any training).

``gap`` = mean over those tokens of ``teacher − adapter`` (nats per token): how much likelier the
served, item-following reply is with the item in context than from the weights alone. An active
item is marked *learned* and leaves the prompt (:func:`~clawdesk.store.prefs.mark_learned`) when

- it had a measurable effect: ``base_gap`` ≥ ``min_effect`` (an item whose served replies are as
  likely without it shows nothing the check could see taken over: a length preference acts mostly
  where a reply ends, past the tokens checked, so it stays in the prompt rather than be retired blind);
- the adapter took most of it over: ``gap`` ≤ ``learn_ratio`` × ``base_gap``. Relative, because
  items differ by a factor of 20 in how much they move a reply (measured: a list ban 0.03 nats per
  token, an opening phrase 0.7; docs/learning.md, "Memory"): most tokens of a reply are content
  the item does not touch;
- a ready version has trained on at least one of its turns;
- the adapter *writes* it (the behaviour test, when the trainer gives the check a ``probe``): on an
  item whose aspect (:func:`~clawdesk.store.pref_topics.aspect`) has a surface feature
  (:mod:`clawdesk.learn.reply_form`: length, lists, paragraphs, opening, closing), the adapter's
  greedy replies *with* the items and *without* them (up to :data:`FORM_TOKENS` tokens, so where a
  reply ends counts) agree on that feature on :data:`FORM_SHARE` (7 of 8) of *each* of two sets of
  up to :data:`FORM_PROMPTS` prompts: the item's newest turns (where the person asked for it, whatever
  else they held) and general prompts no turn held (:mod:`clawdesk.learn.form_probe`, served with the memory block
  of the item's own turn); on length in the item's direction where its words give one
  (:func:`~clawdesk.store.pref_topics.length_direction`: without "at most 40 words" a *shorter* reply
  still agrees; the symmetric rule kept `brief`'s item in the prompt for 48 interactions; with
  ``train.item_word_limit`` a reply within the word limit the item names agrees, and one past it only
  if the reply with the items went as far). So the
  item leaves the prompt only when the person would hardly see the difference, where they asked
  and in a conversation the weights were not trained on. Each set alone misjudged a measured case
  (docs/learning.md, "The behaviour test"): the recent turns are training turns, which the adapter
  answers better than new ones (`brief`: 6 of 8 within 40 words where the new prompts had 2, and
  the held-out score fell to 0.50 once the item left); the general prompts rarely invite a list,
  so on them a list ban agreed 8 of 8 after one version (`no-lists` left at 8, the score fell to
  0.81). An item leaves only when its own set is full (:data:`FORM_PROMPTS` of its turns compared): a
  preference noted a few turns ago agreed 2 of 2 and 3 of 3 there and left beside an older item, and the
  held-out score fell from 0.91 to 0.75 (`add-no-lists`, docs/learning.md, "Evidence before an item
  leaves"). The log-prob
  criterion alone retired items while the adapter still wrote base-like replies (`brief`: the
  held-out score 0.98 → 0.69 right after), since it scores the served replies, not what the
  adapter writes; a log-prob score of the adapter's own replies did not see it either (a reply's
  length is one end token among many). It runs for an item the other criteria would retire, and for
  every learned item on such an aspect (its return, below).

A learned item whose ``gap`` rose above ``return_ratio`` × ``base_gap`` (a later version lost it),
or, on an aspect the behaviour test reads, whose replies without it agree on fewer than
:data:`RETURN_FORM_SHARE` of either set's prompts (under 5 of 8: the hysteresis against 7 of 8 to
leave), is active again, unless an item on a related topic was noted after it was learned: that one may
reverse it, so the old item is *held* out of the prompt
(:func:`~clawdesk.store.prefs.newer_related`; the reverse-paragraphs scenario put both back).

Cost per version: 3 forward passes (teacher, adapter, base) over at most ``CHECK_TURNS`` prompts of
at most ``CHECK_TOKENS`` reply tokens per kept item, with no generation; on the demo model on CPU a
few hundred milliseconds per item (measured: docs/learning.md, "Memory"); an item about to be retired
adds two greedy generations of up to :data:`FORM_TOKENS` tokens per compared prompt (with and without
the items; up to 16 prompts), and so does every learned item on such an aspect, at every version.
The numbers of every check go into the version's ``validation`` (``adapters.validation`` and ``metadata.json``), so
``clawdesk adapters`` readers can see why an item was retired.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from clawdesk.learn import reply_form
from clawdesk.store.log import Store
from clawdesk.store.pref_topics import aspect, length_bound, length_direction
from clawdesk.store.prefs import Preference, get_preference, list_preferences, mark_learned, newer_related
from clawdesk.store.turn_memory import item_trained_turns, item_turns, turn_memory_block, turn_memory_items

if TYPE_CHECKING:
    from clawdesk.learn.form_probe import FormProbe
    from clawdesk.learn.learner import Learner

CHECK_TURNS = 3  # prompts per item
CHECK_TOKENS = 32  # reply tokens per prompt
# Chosen from the table in docs/learning.md, "Memory" (nats per reply token, teacher − student).
LEARN_RATIO = 0.25  # learned: the adapter closed at least 3/4 of the gap the item made on the base
RETURN_RATIO = 0.5  # back: a learned item's gap is over half of it again (hysteresis against noise)
MIN_EFFECT = 0.02  # below it the base barely notices the item (length and follow-up preferences measured ≤ 0.014)
FORM_PROMPTS = 8  # prompts per set the behaviour test compares (3 saw 3 of 3 agree where the held-out score was 0.62)
FORM_SHARE = 0.85  # the share of them whose replies must agree, rounded up: 7 of 8
RETURN_FORM_SHARE = 0.6  # a learned item is back when fewer agree than this share, rounded up: under 5 of 8
FORM_TOKENS = 128  # the behaviour test reads whole replies (a 40-word reply ends by ~60 tokens)


@dataclass(frozen=True)
class ItemCheck:
    """One item's check after one version; ``decision``: 'learned', 'active' (returned), 'kept', 'skipped', or
    'held' (lost by the weights, but kept out of the prompt beside the newer related item ``held_by``)."""

    item_id: int
    status: str  # before the check
    n_turns: int
    n_tokens: int
    n_trained: int  # the item's turns a ready version trained on (this one included)
    gap: float | None  # mean teacher − adapter log-prob per token; None: no turn to measure on
    base_gap: float | None  # mean teacher − base log-prob per token (the item's effect before training)
    decision: str
    held_by: int | None = None
    form: str | None = None  # the aspect the behaviour test compared (None: it did not run)
    form_agree: int | None = None  # recent prompts of the item whose replies with and without the items agree on it
    form_n: int | None = None  # recent prompts compared
    form_words: tuple[float, float] | None = None  # mean words of those replies, with and without the items
    form_direction: str | None = None  # a length item's direction ("shorter" / "longer"): a reply past it agrees
    new_agree: int | None = None  # the same on the probe's prompts, which no turn held (form_probe)
    new_n: int | None = None
    new_words: tuple[float, float] | None = None
    form_needed: int | None = None  # set where the replies agreed on too few of its turns: how many it needs
    form_bound: int | None = None  # the word limit the item names, where it decided (train.item_word_limit)
    wording: str | None = None  # the checked text's fingerprint (:func:`wording_mark`): F8 sees a later edit

    @property
    def form_held_back(self) -> bool:
        """The log-prob criterion was met, but the adapter's replies without the item still differ."""
        return self.form is not None and self.decision == "kept" and self.status == "active"

    def record(self) -> dict:
        return asdict(self)


def check_items(
    store: Store,
    learner: Learner,
    base_sha256: str,
    *,
    probe: FormProbe | None = None,
    trained_now: Iterable[int] = (),
    learn_ratio: float = LEARN_RATIO,
    return_ratio: float = RETURN_RATIO,
    min_effect: float = MIN_EFFECT,
    form_share: float = FORM_SHARE,
    form_prompts: int = FORM_PROMPTS,
    turns: int = CHECK_TURNS,
    tokens: int = CHECK_TOKENS,
    word_limit: bool = False,
) -> list[ItemCheck]:
    """Measure every active and learned item under the learner's current weights (nothing is changed).

    ``trained_now``: the turns of the batch the current weights were just trained on (their version
    may not be recorded yet), counted as trained on. ``probe`` (the general prompts and how to read
    replies) turns the behaviour test on, on its first ``form_prompts`` prompts and as many of the item's
    newest turns, all of which an item needs compared before it may leave; without it the log-prob
    criterion decides alone. ``word_limit`` (``train.item_word_limit``): on a length item that names its
    limit ("at most 40 words"), a reply without the item within that limit agrees (:func:`reply_form.agrees`).
    """
    now = set(trained_now)
    held_now: dict[int, int] = {}
    for turn_id in now:
        for item_id in turn_memory_items(store, turn_id):
            held_now[item_id] = held_now.get(item_id, 0) + 1
    out = []
    for item in list_preferences(store, statuses=("active", "learned")):
        found = item_turns(store, item.id, base_sha256, limit=turns)
        found = [t for t in found if len(t.served_ids) + min(tokens, len(t.reply_ids)) <= learner.config.token_budget]
        trained = item_trained_turns(store, item.id, base_sha256) + held_now.get(item.id, 0)
        mark = wording_mark(item)
        if not found:
            out.append(ItemCheck(item.id, item.status, 0, 0, trained, None, None, "skipped", wording=mark))
            continue
        replies = [t.reply_ids[:tokens] for t in found]
        teacher = learner.logprobs_each([(t.served_ids, r) for t, r in zip(found, replies, strict=True)], adapter=False)
        student = [(t.student_ids, r) for t, r in zip(found, replies, strict=True)]
        adapter = learner.logprobs_each(student, adapter=True)
        base = learner.logprobs_each(student, adapter=False)
        n = sum(len(r) for r in replies)
        gap = sum(float((t - a).double().sum()) for t, a in zip(teacher, adapter, strict=True)) / n
        base_gap = sum(float((t - b).double().sum()) for t, b in zip(teacher, base, strict=True)) / n
        held_by, form = None, {}
        kind = aspect(item.text)
        retiring = item.status == "active" and trained > 0 and base_gap >= min_effect and gap <= learn_ratio * base_gap
        lost = item.status == "learned" and gap > return_ratio * max(base_gap, min_effect)
        carried = item.status == "learned" and not lost
        # What the adapter *writes* is asked of an item about to leave and of a learned one its log-probs still carry.
        if probe is not None and kind in reply_form.FORM_ASPECTS and (retiring or carried):
            direction = length_direction(item.text) if kind == "length" else None
            bound = length_bound(item.text) if word_limit and kind == "length" else None
            # Not bound to `turns`: that is the log-prob check's count, which the next item still needs.
            # Its newest turns, whatever else they held: where the person is now (fewest items first
            # read a stacked phase's first item on the turns from before the second, stop 49).
            recent_turns = item_turns(store, item.id, base_sha256, limit=form_prompts, newest_first=True)
            recent = [(t.served_ids, t.student_ids) for t in recent_turns]
            block = turn_memory_block(store, found[0].turn_id)  # as served on the turn that held the fewest items
            new = list(zip(probe.render(block), probe.student, strict=True))[:form_prompts]
            form = _behaviour(learner, probe, recent, new, kind, direction, bound)
            share = form_share if retiring else RETURN_FORM_SHARE
            # Both sets: the turns where the person asked for it, and conversations the memory never covered.
            agreed = all(form[f"{k}_agree"] >= math.ceil(share * form[f"{k}_n"]) for k in ("form", "new"))
            if retiring:
                # 2 of 2 is no evidence of 7 of 8: a new item waits until it has a full set of its own turns.
                short = agreed and form["form_n"] < form_prompts
                form["form_needed"] = form_prompts if short else None
                retiring = agreed and not short
            else:
                lost = not agreed
        if retiring:
            decision = "learned"
        elif lost:
            newer = newer_related(store, item)
            decision, held_by = ("held", newer.id) if newer else ("active", None)
        else:
            decision = "kept"
        form["wording"] = mark
        out.append(ItemCheck(item.id, item.status, len(found), n, trained, gap, base_gap, decision, held_by, **form))
    return out


def _behaviour(
    learner: Learner,
    probe: FormProbe,
    recent: list,
    new: list,
    kind: str,
    direction: str | None,
    bound: int | None = None,
) -> dict:
    """The behaviour test's fields: the adapter's greedy replies to each (prompt with the items, without them)
    pair of ``recent`` (the item's own turns) and ``new`` (the probe's prompts), compared on ``kind``."""
    out: dict = {"form": kind, "form_direction": direction, "form_bound": bound}
    for key, (served, own) in zip(("form", "new"), form_replies(learner, probe.decode, [recent, new]), strict=True):
        out[f"{key}_agree"] = reply_form.agreement(kind, served, own, direction, bound)
        out[f"{key}_n"] = len(served)
        out[f"{key}_words"] = (reply_form.mean_words(served), reply_form.mean_words(own))
    return out


def form_replies(learner: Learner, decode, sets: Sequence[Sequence[tuple]]) -> list[tuple[list[str], list[str]]]:
    """The adapter's greedy replies (up to :data:`FORM_TOKENS` tokens) to each set of (prompt with the items,
    prompt without them) pairs, all in one generation call: per set ``(with, without)``. A pair whose prompt
    leaves no room for a whole reply in ``train.token_budget`` is left out (a set keeps its first if none fits).
    ``decode`` turns token ids into text."""
    fits = learner.config.token_budget - FORM_TOKENS
    sets = [[(w, wo) for w, wo in pairs if len(w) <= fits] or list(pairs[:1]) for pairs in sets]
    flat = [pair for pairs in sets for pair in pairs]
    prompts = [w for w, _ in flat] + [wo for _, wo in flat]
    replies = decode(learner.sample(prompts, max_tokens=FORM_TOKENS, temperature=0.0, seed=0, adapter=True))
    served, own = replies[: len(flat)], replies[len(flat) :]
    out, start = [], 0
    for pairs in sets:
        end = start + len(pairs)
        out.append((served[start:end], own[start:end]))
        start = end
    return out


def apply_checks(store: Store, checks: Iterable[ItemCheck]) -> list[str]:
    """Mark the items the checks decided on; returns a line per change and per held item, for the progress report."""
    lines = []
    for c in checks:
        if c.decision == "held":
            lines.append(
                f"preference #{c.item_id} is no longer carried by the weights (gap {c.gap:.3f} nats/token), but stays "
                f"out of the prompt: #{c.held_by}, noted since on a related topic, may have changed it"
            )
            continue
        if c.form_held_back:
            lines.append(f"preference #{c.item_id} stays in the prompt: {_held_back(c.record())}")
            continue
        if c.decision not in ("learned", "active"):
            continue
        if get_preference(store, c.item_id).status != c.status:
            continue  # the person changed it meanwhile (removed, restored): their choice stands
        mark_learned(store, c.item_id, c.decision == "learned")
        word = "learned: it leaves the prompt" if c.decision == "learned" else "no longer held: back in the prompt"
        lines.append(f"preference #{c.item_id} {word} ({_numbers(c.record())})")
    return lines


def _numbers(c: dict) -> str:
    """A check's log-prob gap and, where the behaviour test ran, how many prompts agreed."""
    agreed = (
        f"; its replies without it agree in {c['form']} on {c['form_agree']} of {c['form_n']} recent prompts and "
        f"{c['new_agree']} of {c['new_n']} new ones"
        if c.get("form")
        else ""
    )
    return f"gap {c['gap']:.3f} nats/token, before training {c['base_gap']:.3f}{agreed}"


def _held_back(c: dict) -> str:
    """Why an item the log-prob criterion would retire stays: the behaviour test (``c``: an ItemCheck's record)."""
    if c.get("form_needed"):
        return (
            f"its replies without it agree in {c['form']} on {c['form_agree']} of {c['form_n']} recent prompts and "
            f"{c['new_agree']} of {c['new_n']} new ones, but it has only {c['form_n']} turns to compare on "
            f"({c['form_needed']} needed)"
        )
    # A length item with a direction fails only on replies that go the wrong way: say which.
    wrong = {"shorter": "are longer than with it", "longer": "are shorter than with it"}
    differ = wrong.get(c.get("form_direction") or "", f"differ in {c['form']}")
    if c.get("form_bound") is not None and c.get("form_direction") in wrong:
        past = "over" if c["form_direction"] == "shorter" else "under"
        differ = f"{differ} and {past} its {c['form_bound']} words"
    (fw, fwo), (nw, nwo) = c["form_words"], c["new_words"]
    return (
        f"the adapter's replies without it {differ} on {c['form_n'] - c['form_agree']} of {c['form_n']} of its "
        f"recent prompts and {c['new_n'] - c['new_agree']} of {c['new_n']} new ones (gap {c['gap']:.3f} "
        f"nats/token, before training {c['base_gap']:.3f}; words with / without it {fw:.0f} / {fwo:.0f} and "
        f"{nw:.0f} / {nwo:.0f})"
    )


def wording_mark(item: Preference) -> str:
    """A short fingerprint of an item's words, kept with its check instead of the words themselves (the
    versions' log then holds no copy of a preference that ``forget`` would have to find). The item's own
    number and creation time are in it, so once the item is deleted a guessed text cannot be confirmed."""
    return hashlib.sha256(f"{item.id}\n{item.created_at}\n{item.text}".encode()).hexdigest()[:12]


def standing(c: dict, version: int, item: Preference) -> str:
    """Where ``item`` (as it is now) stands after version ``version``'s learned check, for the person (the
    F8 screen and ``clawdesk prefs list``). ``c`` is the item's entry in that version's ``validation["memory"]``
    (:meth:`ItemCheck.record`). The thresholds named are this module's defaults, the app's."""
    at, on_form = f"v{version}", form_aspect(item.text)
    if c.get("wording") not in (None, wording_mark(item)):  # None: checked before the fingerprint was kept
        return (
            f"was edited after the check at {at}, which read its earlier words; it is in the prompt as written "
            "now, and later checks measure the replies served with it"
        )
    decision, status = c.get("decision"), c.get("status")
    if decision == "skipped":
        return f"{at} had no turn served with it that fits the check; it stays in the prompt"
    if decision == "held":
        return (
            f"{at}: the weights no longer carry it, but it stays out of the prompt: #{c['held_by']}, noted since on "
            "a related topic, may have changed it"
        )
    if decision == "learned":
        return f"learned at {at}: the adapter carries it, so it left the prompt ({_numbers(c)})"
    if decision == "active":
        return f"back in the prompt at {at}: the weights no longer carry it ({_numbers(c)})"
    if status == "learned":
        return f"still carried by the weights at {at} ({_numbers(c)})"
    if c.get("form"):
        return f"stays in the prompt at {at}: {_held_back(c)}"
    if not c.get("n_trained"):
        return f"stays in the prompt at {at}: no version has trained on a turn that showed it yet"
    gap, base_gap = c["gap"], c["base_gap"]
    if base_gap < MIN_EFFECT:
        # Nothing the log-prob check reads (a reply's first tokens) moves with it: it cannot be seen taken over.
        return (
            f"stays in the prompt at {at}: it hardly changes how replies begin (before training {base_gap:.3f} "
            f"nats/token, {MIN_EFFECT} needed), so the check cannot see the weights take it over"
        )
    carried = min(max(1 - gap / base_gap, 0.0), 1.0)
    also = f" and its replies without it agree on {math.ceil(FORM_SHARE * FORM_PROMPTS)} of {FORM_PROMPTS}" * on_form
    return (
        f"stays in the prompt at {at}: the weights carry {carried:.0%} of its effect on its recent replies; it "
        f"leaves once they carry {1 - LEARN_RATIO:.0%}{also} ({_numbers(c)})"
    )


def form_aspect(text: str) -> bool:
    """Whether an item's text is about a reply's form the behaviour test compares (length, lists, …)."""
    return aspect(text) in reply_form.FORM_ASPECTS
