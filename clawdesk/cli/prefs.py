"""``clawdesk prefs [list | add TEXT | rm ID | clear]``: the preference memory from the command line.

The items are what the chat renders into every new turn's prompt as the user's stated preferences
(:mod:`clawdesk.store.prefs`, :mod:`clawdesk.preferences`). ``rm`` and ``clear`` delete for good
(the text is overwritten in the file); ``clear`` asks first, or takes ``--yes``, as ``forget --all`` does.
``list`` ends with each item's standing in the newest learned check that measured it.
"""

from __future__ import annotations

import argparse
import sys

from clawdesk.cli.args import count
from clawdesk.cli.common import AddCommand, add_global, opened_store
from clawdesk.config import Config
from clawdesk.errors import InputError

TEXT_CHARS = 70


def add_commands(add: AddCommand) -> None:
    p = add("prefs", cmd_prefs, "list, add or delete the preferences the chat keeps in every prompt")
    sub = p.add_subparsers(dest="prefs_command", metavar="ACTION")
    sub_list = sub.add_parser("list", help="list every item (the default)", description="List every item.")
    sub_list.add_argument("--all", action="store_true", help="also list removed items")
    a = sub.add_parser("add", help="add a preference by hand", description="Add a preference by hand.")
    a.add_argument("text", metavar="TEXT", help='e.g. "no bullet lists, plain sentences"')
    r = sub.add_parser("rm", help="delete item ID for good", description="Delete item ID for good.")
    r.add_argument("id", type=count, metavar="ID", help="the item's number in `clawdesk prefs list`")
    c = sub.add_parser("clear", help="delete every item for good", description="Delete every item for good.")
    c.add_argument("--yes", action="store_true", help="do not ask first")
    for s in (sub_list, a, r, c):
        add_global(s, suppress=True)


def cmd_prefs(args: argparse.Namespace, config: Config) -> int:
    from clawdesk.store.pref_topics import aspect
    from clawdesk.store.prefs import add_preference, clear_preferences, count_preferences, delete_preference

    action = args.prefs_command or "list"
    with opened_store(config) as store:
        if action == "list":
            return _list(store, config, show_removed=getattr(args, "all", False))
        if action == "add":
            added = add_preference(store, args.text)
            if not added.new:
                print(f"already kept as #{added.item.id}: {added.item.text}")
                return 0
            print(f"added #{added.item.id}: {added.item.text}")
            new_aspect = aspect(added.item.text)
            for old in added.replaced:
                # The rule that matched: the aspect when both have the same one, else shared words.
                topic = new_aspect if new_aspect and aspect(old.text) == new_aspect else "shared words"
                print(f"it replaces #{old.id} (same topic: {topic}): {old.text}")
            if not config.memory.enabled:
                print(f"the memory is OFF (memory.enabled = false in {config.config_path}): no prompt shows it")
            return 0
        if action == "rm":
            item = delete_preference(store, args.id)
            print(f"deleted #{item.id}: {item.text}")
            return 0
        n = sum(count_preferences(store).values())
        if n == 0:
            print("There are no preferences to clear.")
            return 0
        if not args.yes and not _confirm_clear(n):
            print("Nothing was deleted.")
            return 1
        print(f"deleted {clear_preferences(store)} preference(s)")
        return 0


def _confirm_clear(n: int) -> bool:
    if not sys.stdin.isatty():
        raise InputError("`prefs clear` deletes every preference; add --yes to confirm when not running in a terminal")
    answer = input(f"Delete all {n} preference(s) for good? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def _list(store, config: Config, *, show_removed: bool) -> int:
    from clawdesk.store.prefs import list_preferences

    statuses = ("active", "learned", "removed") if show_removed else ("active", "learned")
    items = list_preferences(store, statuses=statuses)
    if not config.memory.enabled:
        print(f"the memory is OFF (memory.enabled = false in {config.config_path}): no prompt shows these")
    if not items:
        print('No preferences yet. The chat notes them from your corrections, or: clawdesk prefs add "no lists"')
        return 0
    print(f"{'ID':>4}  {'STATUS':<7}  {'PIN':<3}  {'FROM':<9}  {'CREATED':<16}  {'LEARNED':<16}  TEXT")
    for p in items:
        source = f"turn {p.source_turn_id}" if p.source_turn_id is not None else "by hand"
        text = p.text if len(p.text) <= TEXT_CHARS else p.text[: TEXT_CHARS - 1] + "…"
        pin = "yes" if p.pinned else ""
        created, learned = (_minute(t) for t in (p.created_at, p.learned_at))
        print(f"{p.id:>4}  {p.status:<7}  {pin:<3}  {source:<9}  {created:<16}  {learned:<16}  {text}")
    if any(p.status == "learned" for p in items):
        print(
            "learned: the adapter carries it (measured after training), so it left the prompt; it comes back if not,"
            " unless you stated a related preference since (then F8 puts it back: r to remove, r to restore)"
        )
    _print_checks(store, items)
    return 0


def _print_checks(store, items) -> None:
    """Where each listed item stands in the learned check of the newest version that measured it."""
    from clawdesk.learn.consolidate import standing
    from clawdesk.store.versions import last_item_checks

    checks = last_item_checks(store)
    shown = [(p, checks[p.id]) for p in items if p.id in checks and p.status != "removed"]
    if not shown:
        return
    print("\nthe learned check, after each trained version:")
    for p, (version, record) in shown:
        print(f"  #{p.id}: {standing(record, version, p)}")


def _minute(stamp: str | None) -> str:
    return stamp[:16].replace("T", " ") if stamp else ""
