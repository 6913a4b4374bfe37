"""The ``trtllm`` engine kind: launch ``trtllm-serve`` (or attach), read its capacity and gauges."""
