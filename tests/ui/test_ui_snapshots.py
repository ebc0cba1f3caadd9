"""SVG snapshots of the chat app (pytest-textual-snapshot). Update with ``--snapshot-update``.

Everything on screen is fixed: the scripted engine reports a fixed speed, the header has no
clock, the terminal size is set and the input cursor does not blink. ``assets/chat.svg`` (the
README screenshot) is a copy of the ``test_readme_scene`` snapshot.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from clawdesk.config import ChatConfig, Config
from clawdesk.models import DEMO_NOTE
from clawdesk.store import Store
from clawdesk.ui.app import ClawDeskApp
from tests.support.scripted_engine import ScriptedEngine

SIZE = (100, 30)
README_SCENE = {  # message -> scripted reply; a new chat before the 2nd and 3rd message
    "Can you suggest a 2-day plan for Lisbon?": "Day 1: Alfama and the castle; day 2: Belém and LX Factory.",
    "Why does `import utils` fail in my tests?": "Your tests run from another directory; use a package import.",
    "How do I keep my basil plant alive?": (
        "<think>The user wants practical, short care advice for basil.</think>\n\n"
        "Three things matter most for **basil**:\n\n"
        "1. **Sun**: at least 6 hours a day, a south window is ideal.\n"
        "2. **Water**: when the top 2 cm of soil are dry, never let it sit in water.\n"
        "3. **Pinch** off flower buds so it keeps making leaves.\n\n"
        "Want a watering reminder?"
    ),
    "Yes please, every three days.": (
        "<think>Set expectations: I cannot run timers myself.</think>\n\n"
        "I can't set alarms myself, but here is a reminder you can paste into your calendar:\n\n"
        "```\nWater basil (check the top soil first) — every 3 days, 9:00\n```"
    ),
}
EXCHANGE = (
    "<think>The user wants a short, practical answer about keeping a plant alive.</think>\n\n"
    "Three things matter most for a **basil** plant:\n\n"
    "1. **Sun**: at least 6 hours a day.\n"
    "2. **Water**: when the top soil is dry, not before.\n"
    "3. **Pinch** the flower buds so it keeps growing leaves.\n\n"
    "Want a watering reminder?"
)


@pytest.fixture
def store(tmp_path: Path):
    s = Store.open(tmp_path / "clawdesk.db")
    yield s
    s.close()


def make_app(tmp_path: Path, store: Store, *, demo: bool) -> ClawDeskApp:
    """A Qwen3-like model with thinking, or the demo fallback (no thinking, with its note)."""
    config = Config(home=tmp_path, chat=ChatConfig(max_reply_tokens=200))
    if demo:
        engine = ScriptedEngine([EXCHANGE], name="smollm2-135m", note=DEMO_NOTE)
    else:
        engine = ScriptedEngine([EXCHANGE], thinking=True, tokens_per_s=38.5, name="qwen3-4b")
    return ClawDeskApp(config, engine, store)


async def steady(pilot) -> None:
    pilot.app.chat_input.cursor_blink = False
    await pilot.pause()


async def send_and_wait(pilot, text: str) -> None:
    app = pilot.app
    before = app.store.count_turns()
    app.chat_input.text = text
    await pilot.press("enter")
    deadline = time.monotonic() + 30
    while app.busy or app.store.count_turns() == before:
        assert time.monotonic() < deadline, "the reply did not finish"
        await pilot.pause(0.01)
    await steady(pilot)


def test_empty_new_chat(snap_compare, tmp_path, store):
    assert snap_compare(make_app(tmp_path, store, demo=True), terminal_size=SIZE, run_before=steady)


def test_finished_exchange(snap_compare, tmp_path, store):
    async def run_before(pilot) -> None:
        await send_and_wait(pilot, "How do I keep my basil plant alive?")

    assert snap_compare(make_app(tmp_path, store, demo=False), terminal_size=SIZE, run_before=run_before)


def test_help_screen(snap_compare, tmp_path, store):
    assert snap_compare(make_app(tmp_path, store, demo=True), terminal_size=SIZE, run_before=steady, press=["f1"])


def test_readme_scene(snap_compare, tmp_path, store):
    config = Config(home=tmp_path, chat=ChatConfig(max_reply_tokens=400))
    engine = ScriptedEngine(lambda user: README_SCENE[user], thinking=True, tokens_per_s=31.7, name="qwen3-4b")
    engine.adapter_version = 3
    app = ClawDeskApp(config, engine, store)

    async def run_before(pilot) -> None:
        for i, text in enumerate(README_SCENE):
            if i in (1, 2):
                await pilot.press("ctrl+n")
            await send_and_wait(pilot, text)
        app.refresh_status()  # shows the adapter version set above

    assert snap_compare(app, terminal_size=(110, 34), run_before=run_before)
