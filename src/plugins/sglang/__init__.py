"""The ``sglang`` engine kind: launch an SGLang server (or attach), read its capacity and gauges."""
