"""The chat app's learning keys (F3–F6, "train now", "roll back"); mixed into :class:`ClawDeskApp`.

Kept apart so the app module stays about chatting; the methods use the app's ``store``,
``session``, ``learning`` view (:class:`~clawdesk.ui.learning.LearningView`), ``notify`` and
``push_screen``. What they start runs in the headless loop (:mod:`clawdesk.loop`).
"""

from __future__ import annotations

from clawdesk.errors import ClawDeskError
from clawdesk.ui.learning import LearningView
from clawdesk.ui.learning_screens import LearnedScreen, LearningScreen

NOT_STARTED = "Training did not start: learning is OFF, a step is running, or nothing is judged yet."


class LearningActions:
    """Mixin for :class:`ClawDeskApp`: expects ``store``, ``session``, ``learning``, ``notify``, ``push_screen``."""

    learning: LearningView | None

    def action_rate(self, rating: int) -> None:
        """Thumbs up/down for the last reply of this chat; overrides the judge's score."""
        from clawdesk.store.judgments import last_turn_id, set_rating

        if self.session is None or self.session.n_turns == 0:
            self.notify("There is no reply to rate yet.")
            return
        try:
            turn_id = last_turn_id(self.store, self.session.id)
            set_rating(self.store, turn_id, rating)
        except ClawDeskError as err:
            self.notify(str(err), severity="error")
            return
        self.notify(("👍" if rating > 0 else "👎") + " noted for the last reply (it overrides the judge).", timeout=3)
        if self.learning is not None:
            self.learning.loop.feedback_changed()

    def _need_learning(self) -> LearningView | None:
        if self.learning is None:
            self.notify("Background learning is not running in this window.", severity="warning")
        return self.learning

    def action_learned(self) -> None:
        if isinstance(self.screen, LearnedScreen):  # F5 again closes it
            self.screen.dismiss()
        elif (view := self._need_learning()) is not None:
            self.push_screen(LearnedScreen(view))

    def action_learning_screen(self) -> None:
        if isinstance(self.screen, LearningScreen):  # F6 again closes it
            self.screen.dismiss()
        elif (view := self._need_learning()) is not None:
            self.push_screen(LearningScreen(view))

    def action_train_now(self) -> None:
        if (view := self._need_learning()) is not None and not view.loop.train_now():
            self.notify(NOT_STARTED)

    def action_rollback(self) -> None:
        if (view := self._need_learning()) is not None:
            view.loop.rollback()
