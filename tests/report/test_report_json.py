"""The JSON report: stable keys, view rows, serialisable."""

from __future__ import annotations

import json

from infermatrix.core.report.json_report import TOP_KEYS, render_json
from infermatrix.core.store import RUN_COLUMNS


def columns(store, view):
    return [r[0] for r in store.query(f"DESCRIBE {view}")[1]]


def test_json_keys_are_stable(filled):
    store, run_id, cells, prefill = filled
    doc = render_json(store, run_id)
    assert tuple(doc) == TOP_KEYS == ("format", "version", "run", "prefill", "decode", "latency", "slo", "trace", "points", "workload",
                                            "bursts", "interference")
    assert tuple(doc["workload"]) == ("reuse", "turns", "ttft_by_cached_fraction", "tasks")
    assert tuple(doc["slo"]) == ("cells", "capacity", "frontier", "engine_stats", "search", "search_probes", "price")
    assert all(list(r) == columns(store, "frontier") for r in doc["slo"]["frontier"]) and doc["slo"]["frontier"]
    assert set(doc["run"]) == set(RUN_COLUMNS)
    assert all(list(r) == columns(store, "prefill_list") + ["intervals"] for r in doc["prefill"])
    assert all(list(r) == columns(store, "decode_matrix") + ["reason", "intervals", "telemetry"] for r in doc["decode"])
    assert all(list(r) == columns(store, "latency_percentiles") for r in doc["latency"])
    json.loads(json.dumps(doc))  # plain JSON, no datetimes left


def test_json_values(filled):
    store, run_id, cells, prefill = filled
    doc = render_json(store, run_id)
    assert doc["run"]["run_id"] == run_id and doc["run"]["status"] == "completed"
    assert doc["run"]["started_at"].endswith("Z")
    assert len(doc["decode"]) == len(cells) and len(doc["prefill"]) == len(prefill)
    keys = [(r["context_tokens"], r["concurrency"]) for r in doc["decode"]]
    assert keys == sorted(cells)
    for r in doc["decode"]:
        c = cells[(r["context_tokens"], r["concurrency"])][0]
        assert r["status"] == c.status and r["reason"] == c.reason
        assert r["total_tps"] == (c.total_tps if c.status == "valid" else None)
    valid = sum(1 for c, _ in cells.values() if c.status == "valid")
    assert len(doc["latency"]) == 3 * valid


def test_json_empty_run(store):
    run_id = store.create_run({"engine": "sim"})
    doc = render_json(store, run_id)
    assert (doc["prefill"], doc["decode"], doc["latency"]) == ([], [], [])
