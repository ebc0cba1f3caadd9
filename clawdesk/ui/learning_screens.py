"""The learning screens: "What I learned" (judged turns) and the learning dashboard (training).

Both read the main-thread store and the learning loop's state (:class:`~clawdesk.loop.LoopState`,
through the app's :class:`~clawdesk.ui.learning.LearningView`); changes (veto, thumbs, adapter
choice) go through the store or the loop, never straight to the engine.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Label, ProgressBar, Sparkline, Static

from clawdesk.loop import LoopState
from clawdesk.store.forget import trained_on
from clawdesk.store.judgments import forget, list_judged, set_rating, set_veto
from clawdesk.ui.learning import LearningView
from clawdesk.ui.tool_widgets import step_lines

REWARD = {1: "+1", -1: "−1", 0: " 0", None: " ·"}


def _snip(text: str, n: int = 40) -> str:
    line = " ".join(text.split())
    return line if len(line) <= n else line[: n - 1] + "…"


class LearnedScreen(Screen[None]):
    """Judged turns with their reward, votes and hint; veto, delete or rate them."""

    BINDINGS = [
        Binding("escape,f5", "close", "Back"),
        Binding("v", "veto", "Veto/unveto"),
        Binding("delete,d", "delete", "Forget judgment"),
        Binding("plus,equals_sign", "rate(1)", "👍"),
        Binding("minus", "rate(-1)", "👎"),
    ]

    def __init__(self, view: LearningView) -> None:
        super().__init__()
        self.view = view
        self._ids: list[int] = []

    def compose(self):
        yield Header()
        yield Label(
            "What I learned — rewards come from your next message (+1 moved on, −1 redo/correction); "
            "a hint is what your next message said the reply should have done. Vetoed turns are never trained on.",
            id="learned-intro",
        )
        yield DataTable(id="learned", cursor_type="row", zebra_stripes=True)
        yield Static("", id="learned-detail")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("turn", "reward", "votes", "you asked", "next message", "hint", "")
        self.reload()
        table.focus()

    def reload(self) -> None:
        table = self.query_one(DataTable)
        keep = table.cursor_row
        table.clear()
        rows = list_judged(self.app.store)
        self._ids = [r.turn_id for r in rows]
        for r in rows:
            votes = " ".join(REWARD.get(v, " ?").strip() for v in r.votes)
            flags = "vetoed" if r.vetoed else ("👍" if r.rating == 1 else "👎" if r.rating == -1 else "")
            table.add_row(
                str(r.turn_id), REWARD[r.effective_reward], votes, _snip(r.user_content), _snip(r.next_state),
                _snip(r.hint or "—", 50), flags, key=str(r.turn_id),
            )  # fmt: skip
        if not rows:
            self.query_one("#learned-detail", Static).update(
                "Nothing judged yet. Turns are judged after you answer them, while learning is ON."
            )
        elif keep is not None and keep < len(rows):
            table.move_cursor(row=keep)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.cursor_row is None or event.cursor_row >= len(self._ids):
            return
        row = next(r for r in list_judged(self.app.store) if r.turn_id == self._ids[event.cursor_row])
        detail = f"Reply: {_snip(row.reply_content, 300)}\nHint: {row.hint or '(none)'}"
        steps = step_lines(self.app.store, row.turn_id)  # the agent's tool steps, judged from their results
        if steps:
            detail += "\nTool steps:\n" + "\n".join(steps)
        self.query_one("#learned-detail", Static).update(detail)

    def _current(self) -> int | None:
        row = self.query_one(DataTable).cursor_row
        return self._ids[row] if row is not None and row < len(self._ids) else None

    def action_veto(self) -> None:
        turn_id = self._current()
        if turn_id is None:
            return
        vetoed = next(r.vetoed for r in list_judged(self.app.store) if r.turn_id == turn_id)
        set_veto(self.app.store, turn_id, not vetoed)
        self.reload()
        self.view.loop.refresh()

    def action_delete(self) -> None:
        """Forget what was learned from this turn: its judgment goes, and it is vetoed for good.

        The message itself stays in its chat: erasing words is "Delete chat" (clawdesk.store.forget),
        so the notice says which of the two happened.
        """
        turn_id = self._current()
        if turn_id is None:
            return
        forget(self.app.store, turn_id)
        self.reload()
        self.view.loop.refresh()
        versions = ", ".join(f"v{v}" for v in trained_on(self.app.store, [turn_id]))
        self.notify(
            f"Turn {turn_id}: its judgment is forgotten and it will never be trained on. The message stays in "
            "its chat (delete the chat to erase it)."
            + (f" Adapter {versions} already learned from it: roll back on the F6 screen." if versions else "")
        )

    def action_rate(self, rating: int) -> None:
        turn_id = self._current()
        if turn_id is not None:
            set_rating(self.app.store, turn_id, rating)
            self.reload()
            self.view.loop.refresh()

    def action_close(self) -> None:
        self.dismiss()


class LearningScreen(Screen[None]):
    """Training progress, and loss / reward over adapter versions, with version controls."""

    BINDINGS = [
        Binding("escape,f6", "close", "Back"),
        Binding("t", "train", "Train now"),
        Binding("u", "use", "Serve selected"),
        Binding("r", "rollback", "Roll back"),
        Binding("o", "off", "Base model"),
    ]

    def __init__(self, view: LearningView) -> None:
        super().__init__()
        self.view = view

    def compose(self):
        yield Header()
        with Vertical(id="learning"):
            yield Static("", id="learning-status")
            yield ProgressBar(id="train-progress", show_eta=False)
            with Horizontal(id="plots"):
                with Vertical(classes="plot"):
                    yield Label("loss per version", id="loss-label")
                    yield Sparkline([], id="loss-plot")
                with Vertical(classes="plot"):
                    yield Label("mean reward per version", id="reward-label")
                    yield Sparkline([], id="reward-plot")
            yield DataTable(id="versions", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#versions", DataTable)
        table.add_columns("", "version", "status", "samples", "loss", "reward", "clip", "kl", "created", "note")
        self.view.listeners.append(self.update_state)
        self.reload()
        self.update_state(self.view.loop.state)
        table.focus()

    def on_unmount(self) -> None:
        if self.update_state in self.view.listeners:
            self.view.listeners.remove(self.update_state)

    def reload(self) -> None:
        from clawdesk.learn.versions import list_versions
        from clawdesk.reload import active_version

        rows = list_versions(self.app.store)
        active = active_version(self.app.store)
        table = self.query_one("#versions", DataTable)
        table.clear()
        for v in rows:
            m = v.metrics
            table.add_row(
                "▶" if v.version == active else "", f"v{v.version}", v.status, str(v.n_samples),
                _fmt(m.get("loss")), _fmt(m.get("reward_mean")), _fmt(m.get("clip_frac")), _fmt(m.get("kl")),
                v.created_at[:16].replace("T", " "), _snip(v.note, 40), key=str(v.version),
            )  # fmt: skip
        ready = [v for v in rows if v.status == "ready"]
        losses = [float(v.metrics.get("loss", 0.0)) for v in ready]
        rewards = [float(v.metrics.get("reward_mean", 0.0)) for v in ready]
        self.query_one("#loss-plot", Sparkline).data = losses
        self.query_one("#reward-plot", Sparkline).data = rewards
        if losses:
            self.query_one("#loss-label", Label).update(f"loss per version (last {losses[-1]:.4f})")
            self.query_one("#reward-label", Label).update(f"mean reward per version (last {rewards[-1]:+.2f})")

    def update_state(self, s: LoopState) -> None:
        learning = "ON" if self.app.store.learning_enabled else "OFF"
        lines = [
            f"Learning {learning} · serving {self._serving()} · judge: {s.judge_ready} ready, "
            f"{s.judge_waiting} waiting for your next message" + (f" · judging {s.judging}" if s.judging else ""),
            f"Next training step: {min(s.ready_samples, s.batch_size)}/{s.batch_size} judged samples ready"
            + ("" if s.ready_samples >= s.batch_size else " (press t to train on what is ready now)"),
        ]
        bar = self.query_one("#train-progress", ProgressBar)
        if s.running:
            m = s.metrics
            lines.append(
                f"Training: {s.message or s.phase}"
                + (f" · loss {_fmt(m.get('loss'))} · reward {_fmt(m.get('reward_mean'))}" if m else "")
            )
            bar.update(total=max(1, s.steps) * 4, progress=_phase_progress(s))
        else:
            bar.update(total=1, progress=0)
            if s.message:
                lines.append(f"Last run: {s.message}")
        self.query_one("#learning-status", Static).update("\n".join(lines))
        if not s.running:
            self.reload()

    def _serving(self) -> str:
        label = self.view.loop.serving()
        return "base model" if label == "base" else label

    def _selected(self) -> int | None:
        table = self.query_one("#versions", DataTable)
        if table.cursor_row is None or table.row_count == 0:
            return None
        return int(table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value)

    def action_train(self) -> None:
        if not self.view.loop.train_now():
            self.notify("Training did not start: learning is OFF, a step is running, or nothing is judged yet.")

    def action_use(self) -> None:
        n = self._selected()
        if n is not None:
            self.view.loop.activate(n)

    def action_rollback(self) -> None:
        self.view.loop.rollback()

    def action_off(self) -> None:
        self.view.loop.activate(None)

    def action_close(self) -> None:
        self.dismiss()


_PHASES = ("starting", "loading", "scoring", "step", "writing", "validating", "done")


def _phase_progress(s: LoopState) -> int:
    """Progress units: 4 per step, spread over the phases of a step."""
    base = max(0, s.step - 1) * 4 if s.phase != "done" else max(1, s.steps) * 4
    within = {"loading": 0, "scoring": 1, "step": 2, "writing": 3, "validating": 3}.get(s.phase, 0)
    return base + within


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "—"
