"""Telemetry rows for a stored run, as core/telemetry would read them (engine_samples, gpu_series): tests of the views,
the report section and the cookbook build them from known numbers and check the answers against those numbers."""

from __future__ import annotations

import json
from typing import Any

from infermatrix.core.store.telemetry import save_series

WINDOW_S = 30.0


def add_telemetry(store: Any, run_id: str, cells: dict[tuple[int, int], Any], *, power_w: float = 400.0,
                  preempting: set[tuple[int, int]] = frozenset(), throttled: set[tuple[int, int]] = frozenset()) -> dict:
    """Give each cell of ``cells`` (key -> (CellResult, _)) a window of its own, [100 k, 100 k + 30] s, with an engine read
    and a GPU read every second from 1 s before it to 1 s after: the generated-token counter rising at the cell's
    total_tps, KV usage 0.5, preemptions rising 2 a second and 3 waiting in ``preempting`` cells, one GPU at ``power_w``
    with the power-cap bit set in ``throttled`` cells. Returns {key: window start}."""
    starts = {}
    for k, key in enumerate(sorted(cells)):
        c = cells[key][0]
        ws = 100.0 * (k + 1)
        starts[key] = ws
        store.query("UPDATE cells SET window_start = ?, window_end = ? WHERE run_id = ? AND context_tokens = ? AND concurrency = ?",
                    [ws, ws + WINDOW_S, run_id, key[0], key[1]])  # fmt: skip
        tps = c.total_tps or 0.0
        engine, gpu = [], []
        for i in range(int(WINDOW_S) + 3):
            t = ws - 1.0 + i
            pre = key in preempting
            values = {"running": float(key[1]), "waiting": 3.0 if pre and i > 2 else 0.0, "kv_usage": 0.5,
                      "generated_tokens": 1e6 + tps * (t - ws), "preemptions": 2.0 * i if pre else 0.0}  # fmt: skip
            engine += [(t + 1e9, t, "measure", f"cell {key}", key[0], key[1], m, json.dumps({"__name__": f"e:{m}"}), v) for m, v in values.items()]
            mask = 0x4 if key in throttled and i > 5 else 0
            gpu.append((t + 1e9, t, "measure", f"cell {key}", key[0], key[1], 0, power_w, 5e7 + power_w * 1000 * t, 1980, 2619, 1000, 90, 60, mask))
        save_series(store, run_id, engine, gpu)
    return starts
