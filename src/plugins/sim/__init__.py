"""The simulated engine: a real OpenAI-API HTTP server that models a continuous-batching engine.

Modules: ``profile`` (what to simulate), ``tokenizer`` (how it counts), ``textgen`` (what it says),
``scheduler`` (the engine model and its ground-truth record), ``metrics`` (vLLM-named Prometheus
text), ``api`` (request parsing and response shapes), ``server`` (the starlette app and ``serve``),
``plugin`` (the pluggy hooks). Only ``plugin`` and ``profile`` are imported by the CLI at start-up;
the server stack loads when a server runs.
"""
