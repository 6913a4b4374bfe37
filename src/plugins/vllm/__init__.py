"""The ``vllm`` engine kind: launch ``vllm serve`` (or attach to one), describe it, read its capacity."""
