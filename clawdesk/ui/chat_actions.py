"""The chat app's key and palette actions that are not about a turn or learning.

:class:`ChatActions` is a mixin of :class:`~clawdesk.ui.app.ClawDeskApp` (kept apart so the app
module stays about layout and sessions): the learning and thinking switches, copying a reply, the
memory and help screens, renaming and deleting chats, and the command palette's entries.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from textual import work
from textual.app import SystemCommand
from textual.screen import Screen

from clawdesk.errors import ClawDeskError
from clawdesk.store import Session, Store
from clawdesk.ui.screens import ConfirmScreen, HelpScreen, RenameScreen


class ChatActions:
    """Mixin for :class:`ClawDeskApp`: expects ``store``, ``session``, ``engine``, ``learning``, ``status_bar``."""

    def action_toggle_learning(self) -> None:
        try:
            self.store.set_learning(not self.store.learning_enabled)
            enabled = self.store.learning_enabled
        except ClawDeskError as err:
            self.notify(str(err), severity="error")
            return
        self.status_bar.learning = enabled
        if self.learning is not None:
            self.learning.loop.set_learning(enabled)
        if enabled:
            self.notify("Learning ON: ClawDesk learns from how you respond.")
        else:
            self.notify("Learning OFF: chats are still saved, but nothing new is learned.")

    def action_toggle_thinking(self) -> None:
        if not self.engine.supports_thinking:
            self.notify(f"{self.engine.identity.name} has no thinking mode; Qwen3 models have one.", severity="warning")
            return
        enabled = not self.thinking_enabled
        if self.session is not None:
            try:
                self.store.set_session_flags(self.session.id, thinking=enabled)
                self.session = self.store.get_session(self.session.id)
            except ClawDeskError as err:
                self.notify(str(err), severity="error")
                return
        else:
            self._draft_thinking = enabled
        self.refresh_status()
        self.notify(f"Thinking {'ON' if enabled else 'OFF'} for this chat.")

    def action_copy_reply(self) -> None:
        if not self._last_reply:
            self.notify("There is no reply to copy yet.", severity="warning")
            return
        self.copy_to_clipboard(self._last_reply)
        self.notify("Copied the last reply to the clipboard.")

    def action_memory(self) -> None:
        from clawdesk.ui.memory_screen import MemoryScreen

        if isinstance(self.screen, MemoryScreen):  # F7 again closes it
            self.screen.dismiss()
        else:
            self.push_screen(MemoryScreen(self.store))

    def action_preferences(self) -> None:
        from clawdesk.ui.prefs_screen import PreferencesScreen

        if isinstance(self.screen, PreferencesScreen):  # F8 again closes it
            self.screen.dismiss()
        else:
            self.push_screen(PreferencesScreen(self.store))

    def preference_noted(self, item_id: int, text: str, kind: str, replaced: tuple[int, ...] = ()) -> None:
        """Tell the person a preference was noted (the learning loop's PreferenceNoted); F9 undoes it."""
        self.noted_preference = item_id
        quoted = text if len(text) <= 80 else text[:79] + "…"
        what = "Noted a preference" if kind == "standing" else "Noted as a preference (if it was only for that reply"
        what += "" if kind == "standing" else ", undo it)"
        also = f" It replaces #{', #'.join(map(str, replaced))}." if replaced else ""
        self.notify(f"{what}: “{quoted}”.{also} F9 undoes it · F8 lists them.", title="Preference", timeout=10)

    def action_undo_preference(self) -> None:
        from clawdesk.store.prefs import undo_preference

        if self.noted_preference is None:
            self.notify("No preference was just noted; F8 lists them all.", severity="warning")
            return
        try:
            item, restored = undo_preference(self.store, self.noted_preference)
        except ClawDeskError as err:
            self.notify(str(err), severity="error")
            return
        finally:
            self.noted_preference = None
        back = f" #{', #'.join(str(p.id) for p in restored)} is active again." if restored else ""
        self.notify(f"Undone: “{item.text[:60]}” is not kept.{back}")

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.HELP_KEYS))

    def _saved_session(self, session_id: int | None, unsaved: str) -> Session | None:
        """The session to act on (default: the open one), or None after telling the user why not."""
        sid = session_id if session_id is not None else (self.session.id if self.session is not None else None)
        if sid is None:
            self.notify(unsaved, severity="warning")
            return None
        try:
            return self.store.get_session(sid)
        except ClawDeskError as err:
            self.notify(str(err), severity="error")
            return None

    def action_rename_chat(self, session_id: int | None = None) -> None:
        session = self._saved_session(session_id, "This chat is not saved yet: send a message first, then rename it.")
        if session is None:
            return
        sid = session.id

        async def rename(title: str | None) -> None:
            if title is None:
                return
            try:
                self.store.rename_session(sid, title)
            except ClawDeskError as err:
                self.notify(str(err), severity="error")
                return
            if self.session is not None and self.session.id == sid:
                self.session = self.store.get_session(sid)
            await self.refresh_sessions()
            self.refresh_status()

        self.push_screen(RenameScreen(session.title), rename)

    def action_delete_chat(self, session_id: int | None = None) -> None:
        session = self._saved_session(session_id, "This chat is not saved yet, so there is nothing to delete.")
        if session is None:
            return
        sid = session.id
        if self._turn is not None and self._turn.session_id == sid:
            self._refuse_while_busy()
            return

        async def delete(yes: bool | None) -> None:
            if yes:
                self._forget_chat(sid, session.title)

        question = f"Delete “{session.title}” and its {session.n_turns} exchange(s)? This cannot be undone."
        self.push_screen(ConfirmScreen(question), delete)

    @work(thread=True, group="forget", name="delete chat", exit_on_error=False)
    def _forget_chat(self, sid: int, title: str) -> None:
        """Delete a chat for good in a thread: the VACUUM rewrites the whole file, which takes a while on a big log."""
        from clawdesk.store.forget import forget_session

        try:
            store = Store.open(self.store.path)  # one connection per thread
            try:
                # Deletes the turns with their judgments and samples, then VACUUMs: no text left in the file.
                result = forget_session(store, sid)
            finally:
                store.close()
        except ClawDeskError as err:
            self.call_from_thread(self.notify, str(err), severity="error")
            return
        self.call_from_thread(self._chat_forgotten, sid, title, result.advice())

    async def _chat_forgotten(self, sid: int, title: str, advice: str) -> None:
        if self.session is not None and self.session.id == sid:
            await self.start_new_chat()
        else:
            await self.refresh_sessions()
        self.notify(f"Deleted “{title}”." + (f"\n{advice}" if advice else ""))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield SystemCommand("New chat", "Start a new chat (Ctrl+N)", self.action_new_chat)
        yield SystemCommand(
            "New incognito chat", "A chat kept out of learning (Ctrl+G)", partial(self.action_new_chat, True)
        )
        yield SystemCommand("Rename chat", "Rename the open chat (F2)", self.action_rename_chat)
        yield SystemCommand("Delete chat", "Delete the open chat and its messages", self.action_delete_chat)
        yield SystemCommand(
            "Toggle learning", "Learn from how you respond, or not (Ctrl+L)", self.action_toggle_learning
        )
        yield SystemCommand(
            "Toggle thinking", "Let the model think before answering (Ctrl+T)", self.action_toggle_thinking
        )
        yield SystemCommand("Copy last reply", "Copy the last answer to the clipboard (Ctrl+Y)", self.action_copy_reply)
        if self._turn is not None:
            yield SystemCommand("Stop reply", "Stop the reply being written (Esc)", self.action_stop)
        yield SystemCommand("Thumbs up", "Mark the last reply as good (F3)", partial(self.action_rate, 1))
        yield SystemCommand("Thumbs down", "Mark the last reply as bad (F4)", partial(self.action_rate, -1))
        yield SystemCommand("What I learned", "Judged turns, rewards and hints; veto (F5)", self.action_learned)
        yield SystemCommand(
            "Learning dashboard", "Training progress and adapter versions (F6)", self.action_learning_screen
        )
        yield SystemCommand("Train now", "Run a training step on the judged turns ready now", self.action_train_now)
        yield SystemCommand("Roll back adapter", "Serve the previous adapter version", self.action_rollback)
        yield SystemCommand("Memory", "Notes the assistant keeps across chats; delete them (F7)", self.action_memory)
        yield SystemCommand("Help", "List the keys (F1)", self.action_help)
        yield from super().get_system_commands(screen)
