"""Running a matrix: the runner, planning, prefill probes, decode cells, per-cell accounting, workload sessions,
sweeps (local and over a Ray cluster) and the progress display.

May import every layer below it: ``core/load/`` (points, traces, the SLO search), ``core/measure/``,
``core/distributed/``, ``core/stream/``, ``core/engine/``, ``core/store/``, ``core/report/``, ``core/slo/``.
Nothing in ``core/`` imports run (tests/core/test_layers.py).
"""
