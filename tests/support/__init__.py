"""Helpers shared by tests in several folders (not tests): scripted engine, demo LoRAs, UI and loop helpers."""
