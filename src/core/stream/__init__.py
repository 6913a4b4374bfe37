"""The streaming client: one OpenAI-compatible streaming request read and stamped chunk by chunk.

Holds the request body and the httpx reader (``client``), the raw asyncio reader (``transport``) and the choice
between them (``transport_choice``), the SSE splitter (``sse``), the chunk parser (``chunks``), and the event-loop
lag monitor every reading process runs (``loop_lag``).

May import: ``core/engine/`` (traits: how an engine's body and usage look) and the core's plain modules
(``types``). Never ``distributed``, ``measure``, ``load`` or ``run``: every one of those reads
streams through this package (tests/core/test_layers.py).
"""
