"""Tests of clawdesk/ui/: the Textual app through the pilot, and its SVG snapshots (in __snapshots__/)."""
