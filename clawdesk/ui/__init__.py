"""The Textual chat interface (``clawdesk chat``). Only the CLI imports this package.

Import the app from :mod:`clawdesk.ui.app`; this package module imports nothing so that
importing ClawDesk never pulls in Textual.
"""
