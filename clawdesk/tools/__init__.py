"""Stage: tools — what the agent may do on this machine, and with whose consent.

``types`` (spec, call, result) · ``format`` (Qwen3's ``<tool_call>`` blocks and tool messages) ·
``jail``, ``beneath``, ``tree`` (the workspace every file tool stays inside: opened beneath
it, no link followed) · ``files``, ``search`` (+ ``search_worker``), ``shell`` (+ ``sandbox``,
its Landlock and subreaper supervisor), ``memory``, ``builtins`` (the built-in tools) ·
``consent`` (auto / ask / never, and a decision per call) ·
``registry`` (one entry point that checks, asks, runs, times and caps a call) · ``mcp`` (tools
from Model Context Protocol servers over stdio). Nothing here imports textual; the UI asks consent
and renders results, it never runs a tool.
"""
