"""``clawdesk serve``: a local OpenAI-compatible endpoint that records, judges and trains.

Split by responsibility (none of it imports textual, nothing happens at import time):

- :mod:`~clawdesk.serve.schema`: OpenAI request bodies → template messages and sampling; replies and
  stream chunks in OpenAI's shape; :class:`~clawdesk.serve.schema.ApiError` and its error JSON.
- :mod:`~clawdesk.serve.view`: what of a raw reply a client sees while it streams (thinking as
  ``reasoning_content``, ``<tool_call>`` blocks and ``stop`` strings held back).
- :mod:`~clawdesk.serve.security`: the API token file, and the Host / Origin / bearer-token guard.
- :mod:`~clawdesk.serve.sessions`: which recorded session a request continues.
- :mod:`~clawdesk.serve.worker`: the one thread that owns the engine: generates, records, notifies the loop.
- :mod:`~clawdesk.serve.app`: the Starlette routes and the server-sent-event stream.
- the ``serve`` subcommand is :mod:`clawdesk.cli.serve`.
"""
