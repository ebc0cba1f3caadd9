"""ClawDesk: a local personal agent that learns from being used.

Stages, one package each: ``engine`` (llama.cpp chat) → ``store`` (turn log) → ``judge``
(next-state rewards and hints) → ``learn`` (objective, trainer, adapter writer) → ``reload``
(hot-swap); ``ui`` (Textual) and ``cli`` sit on top. Importing this package does nothing.
"""

__version__ = "0.1.0"
