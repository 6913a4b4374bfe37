"""A cell's streams spread over processes and hosts: worker processes (``workers``), Ray actors and their pool
(``ray_actor``, ``ray_pool``; Ray is imported only there, lazily), and the clocks of other hosts (``clocks``:
the offset and drift fit; ``hostclock``: records put on the coordinator's clock).

May import: ``core/stream/`` (the client each worker runs), ``core/engine/`` and the core's plain modules. Never
``measure``, ``load`` or ``run``: the closed-loop cell (``core/measure/cell.py``) opens a pool from here, so this
package sits below it. The per-host verdict (``measure/hosts.py``) judges a cell's numbers and stays in measure;
sweeps over a Ray cluster (``run/sweep_ray.py``) start whole runs and stay in run (tests/core/test_layers.py).
"""
