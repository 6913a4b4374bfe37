"""The closed-loop decode cell: warm-up, the ramp to N streams, steady state from the engine's gauges, the
window, every cell number (``metrics``), the verdicts (``selfcheck``, ``admission``, ``ramp_check``, ``hosts``),
HDR histograms, reconciliation with the engine's counters, and prompt sizing (``tokenizer``).

May import: ``core/distributed/`` (the cell's streams in worker processes or on Ray actors), ``core/stream/``,
``core/engine/`` and the core's plain modules. Never ``load`` or ``run`` (tests/core/test_layers.py).
"""
