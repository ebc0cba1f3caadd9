"""The small error hierarchy of ClawDesk.

Stage modules raise these; the edges (``cli.main`` and the Textual app) turn them into a
one-paragraph message for a person. Every message names the thing that is wrong and what to do
about it, so nothing above the edges needs to add context.
"""

from __future__ import annotations


class ClawDeskError(Exception):
    """Base class: ``str(err)`` is a complete, user-facing message."""

    exit_code = 1


class ConfigError(ClawDeskError):
    """The config file or a command-line override is invalid."""

    exit_code = 2


class DataDirError(ClawDeskError):
    """The data directory cannot be created or written."""


class StoreError(ClawDeskError):
    """The SQLite turn log cannot be opened, migrated or written."""


class ModelError(ClawDeskError):
    """A model file is missing, unreadable, not a GGUF, or fails to load."""


class EngineClosed(ModelError):
    """The model was closed (the app is ending) while other work still wanted it."""

    def __init__(self) -> None:
        super().__init__("the model has been closed (ClawDesk is shutting down); nothing more can run on it")


class PullError(ClawDeskError):
    """Downloading a model failed (network, disk, or checksum)."""


class InputError(ClawDeskError):
    """A user message (or other input) cannot be used as given."""

    exit_code = 2


class JudgeError(ClawDeskError):
    """The self-judge could not run."""


class TrainError(ClawDeskError):
    """The learner could not build samples, train, or write an adapter."""


class AdapterError(ClawDeskError):
    """An adapter cannot be loaded, validated, or served with this base model."""


class NotFoundError(ClawDeskError):
    """A session, turn or adapter version that was asked for does not exist."""


class ToolInputError(ClawDeskError):
    """A tool call cannot be carried out as asked (a path outside the workspace, no unique match...).

    Raised inside the tools stage and turned into an ``error`` tool result by the registry, never
    shown as a crash: the message is written so the model can read it and correct its call.
    """
