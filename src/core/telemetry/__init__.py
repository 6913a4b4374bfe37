"""Telemetry while a run measures: the engine's own metrics as a time series (``engine_series``) and every GPU
through NVML (``nvml``), each read by a thread of its own at a fixed cadence (``ticker``), off the client's event
loop, and gathered by ``recorder.Telemetry`` for the run to save between steps (docs/telemetry.md).

Layer: above ``engine`` (it reads the traits' metric names and the Prometheus helpers), below everything else;
it imports no store, measure, load or run module (the run saves what it drains).
"""
