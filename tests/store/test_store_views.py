"""The contract views: exact columns, values from what was saved, NULLs for discarded cells."""

from __future__ import annotations

import math

import pytest

from imx_factories import REFERENCE_OTHER, REFERENCE_VALID, fill_run, make_cell, make_prefill
from infermatrix.core.contexts import format_context
from infermatrix.core.store import Store
from infermatrix.core.store.connect import SCHEMA_VERSION

# DESIGN.md §4 and the store brief: names and order are the public contract.
CONTRACT = {
    "prefill_list": ["run_id", "engine", "model", "context_label", "context_tokens", "prompt_tokens", "prompt_tps",
                     "ttft_ms", "status"],
    "decode_matrix": ["run_id", "engine", "model", "context_label", "context_tokens", "concurrency", "status",
                      "total_tps", "per_request_tps", "ttft_ms", "tbt_ms", "avg_active", "completed",
                      "output_tokens", "measured_s"],
    "engine_comparison": ["run_a", "run_b", "context_label", "concurrency", "metric", "value_a", "value_b", "ratio"],
    "latency_percentiles": ["run_id", "context_label", "concurrency", "metric", "p50", "p90", "p99", "p999", "max"],
}
# Added after DESIGN.md's list, at the end (schema v3, v4, v9: docs/metrics.md): adding is allowed, renaming is not.
ADDED = {
    "prefill_list": ["samples"],
    "decode_matrix": ["ran_at_most", "ttft_burst_ms", "ttft_restart_ms", "doubtful", "repeats", "noisier_than_window"],
    "engine_comparison": ["method_match"],
}
NUMBERS = ["total_tps", "per_request_tps", "ttft_ms", "tbt_ms", "avg_active", "completed", "output_tokens", "measured_s"]


@pytest.mark.parametrize("view", sorted(CONTRACT))
def test_view_columns_are_the_contract(store, view):
    cols, rows = store.query(f"DESCRIBE {view}")
    assert [r[0] for r in rows] == CONTRACT[view] + ADDED.get(view, [])
    # and a plain select sees the same order
    cols, _ = store.query(f"SELECT * FROM {view}")
    assert cols == CONTRACT[view] + ADDED.get(view, [])


def test_schema_applied_once_and_idempotent(db_path):
    for _ in range(3):
        with Store(db_path) as s:
            _, rows = s.query("SELECT version FROM schema_version")
            assert rows == [(SCHEMA_VERSION,)]
    with Store(db_path, read_only=True) as s:  # read-only open accepts a current store
        assert s.query("SELECT count(*) FROM runs")[1] == [(0,)]


def test_decode_matrix_values_and_nulls(store):
    run_id, cells, _ = fill_run(store)
    cols, rows = store.query("SELECT * FROM decode_matrix WHERE run_id = ?", [run_id])
    got = {(r[4], r[5]): dict(zip(cols, r)) for r in rows}
    assert set(got) == set(cells)
    for key, (c, _) in cells.items():
        row = got[key]
        assert row["status"] == c.status
        assert row["engine"] == "vllm" and row["model"] == "qwen"
        assert row["context_label"] == format_context(c.context_tokens)
        for name in NUMBERS:
            if c.status == "valid":
                assert row[name] == pytest.approx(getattr(c, name)), name
            else:
                assert row[name] is None, (key, name)
    # the cells table keeps the looped cell's numbers as evidence; only the view hides them
    looped = next(k for k, (s, _) in REFERENCE_OTHER.items() if s == "looped")
    _, raw = store.query("SELECT total_tps FROM cells WHERE run_id = ? AND context_tokens = ? AND concurrency = ?",
                         [run_id, *looped])
    assert raw[0][0] == pytest.approx(cells[looped][0].total_tps)


def test_statuses_are_the_known_ones(store):
    run_id, cells, _ = fill_run(store)
    _, rows = store.query("SELECT DISTINCT status FROM decode_matrix")
    assert {r[0] for r in rows} == {c.status for c, _ in cells.values()}
    assert {r[0] for r in rows} <= {"valid", "looped", "over_capacity", "error", "client_bound", "interrupted"}


def test_prefill_list(store):
    run_id, _, prefill = fill_run(store)
    bad = make_prefill(4096, status="error")
    store.save_prefill(run_id, bad)
    cols, rows = store.query("SELECT * FROM prefill_list WHERE run_id = ? ORDER BY context_tokens", [run_id])
    got = [dict(zip(cols, r)) for r in rows]
    expected = sorted(prefill + [bad], key=lambda p: p.context_tokens)
    assert [g["context_tokens"] for g in got] == [p.context_tokens for p in expected]
    for g, p in zip(got, expected):
        assert g["context_label"] == format_context(p.context_tokens)
        assert g["status"] == p.status
        if p.status == "valid":
            assert g["prompt_tps"] == pytest.approx(p.prompt_tps)
            assert g["ttft_ms"] == pytest.approx(p.ttft_ms)
            assert g["prompt_tokens"] == p.prompt_tokens
        else:
            assert g["prompt_tps"] is None and g["ttft_ms"] is None


def test_prefill_resave_replaces(store):
    run_id = store.create_run({"engine": "sim", "model": "m"})
    store.save_prefill(run_id, make_prefill(8192, status="error"))
    store.save_prefill(run_id, make_prefill(8192))
    _, rows = store.query("SELECT status FROM prefill_list WHERE run_id = ?", [run_id])
    assert rows == [("valid",)]


@pytest.mark.parametrize("tokens", [1, 1000, 1024, 1025, 2048, 8192, 257024, 262144, 262145, 3 * 1024 * 1024])
def test_context_label_matches_format_context(store, tokens):
    _, rows = store.query("SELECT context_label(?::INTEGER)", [tokens])
    assert rows[0][0] == format_context(tokens)


def _comparison_rows(store):
    cols, rows = store.query("SELECT * FROM engine_comparison")
    return [dict(zip(cols, r)) for r in rows]


@pytest.mark.slow  # over a second of CPU (several runs written to DuckDB)
def test_engine_comparison_pairs_and_ratio(store):
    a, cells_a, _ = fill_run(store, seed=1)
    b, cells_b, _ = fill_run(store, {"engine": "sglang"}, scale=1.25, seed=2, other=False)
    # one cell valid in A becomes looped in B: it must drop out of the comparison
    dropped = (8 * 1024, 2)
    cells_b[dropped] = make_cell(*dropped, status="looped", reason="loop", scale=1.25)
    store.save_cell(b, cells_b[dropped][0])
    c3 = store.create_run({"engine": "llamacpp", "model": "qwen"})  # no cells: pairs with nothing

    rows = _comparison_rows(store)
    common = [k for k, (c, _) in cells_a.items()
              if c.status == "valid" and k in cells_b and cells_b[k][0].status == "valid"]
    assert dropped not in common and common
    metrics = ["total_tps", "per_request_tps", "ttft_ms", "tbt_ms"]
    assert len(rows) == 2 * len(common) * len(metrics)
    assert {(r["run_a"], r["run_b"]) for r in rows} == {(a, b), (b, a)}
    assert all(c3 not in (r["run_a"], r["run_b"]) for r in rows)
    index = {(r["run_a"], r["run_b"], r["context_label"], r["concurrency"], r["metric"]): r for r in rows}
    for ctx, n in common:
        ca, cb = cells_a[(ctx, n)][0], cells_b[(ctx, n)][0]
        for m in metrics:
            va, vb = getattr(ca, m), getattr(cb, m)
            r = index[(a, b, format_context(ctx), n, m)]
            assert r["value_a"] == pytest.approx(va) and r["value_b"] == pytest.approx(vb)
            assert r["ratio"] == pytest.approx(vb / va)
            back = index[(b, a, format_context(ctx), n, m)]
            assert back["ratio"] == pytest.approx(va / vb)


def test_engine_comparison_zero_baseline_gives_null_ratio(store):
    a = store.create_run({"engine": "x", "model": "m"})
    b = store.create_run({"engine": "y", "model": "m"})
    ca, _ = make_cell(1024, 1)
    ca.tbt_ms = 0.0
    store.save_cell(a, ca)
    store.save_cell(b, make_cell(1024, 1, scale=2.0)[0])
    r = [x for x in _comparison_rows(store) if x["run_a"] == a and x["metric"] == "tbt_ms"]
    assert len(r) == 1 and r[0]["ratio"] is None


def test_reference_cells_all_saved(store):
    run_id, cells, _ = fill_run(store)
    assert len(cells) == len(REFERENCE_VALID) + len(REFERENCE_OTHER)
    _, rows = store.query("SELECT count(*) FROM cells WHERE run_id = ?", [run_id])
    assert rows[0][0] == len(cells)


def test_numbers_are_null_not_nan(store):
    run_id = store.create_run({"engine": "x", "model": "m"})
    c, _ = make_cell(2048, 4)
    c.tbt_ms = math.nan
    store.save_cell(run_id, c)
    _, rows = store.query("SELECT tbt_ms FROM decode_matrix WHERE run_id = ?", [run_id])
    assert rows == [(None,)]


def _method_run(store, **info):
    base = {"engine": "x", "model": "m", "duration_s": 30.0, "max_output": 4096, "prompt_mode": "distinct", "api": "completions",
            "config": {"matrix": {"temperature": 0.0}}}
    run_id = store.create_run({**base, **info})
    c, _ = make_cell(1024, 1)
    c.token_source = "usage"
    store.save_cell(run_id, c)
    return run_id


def _match(store, a, b):
    _, rows = store.query("SELECT DISTINCT method_match FROM engine_comparison WHERE run_a = ? AND run_b = ?", [a, b])
    assert len(rows) == 1
    return rows[0][0]


def test_engine_comparison_says_whether_the_method_matched(store):
    a = _method_run(store)
    same = _method_run(store, engine="y")
    longer = _method_run(store, engine="y", max_output=256)
    hot = _method_run(store, engine="y", config={"matrix": {"temperature": 0.7}})
    old = _method_run(store, engine="y", config={"matrix": {}})  # measured before temperature was a field: 0
    unknown = _method_run(store, engine="y", duration_s=None)  # e.g. an imported page that does not say
    assert _match(store, a, same) is True and _match(store, same, a) is True
    assert _match(store, a, longer) is False
    assert _match(store, a, hot) is False
    assert _match(store, a, old) is True
    assert _match(store, a, unknown) is None
    assert _match(store, longer, unknown) is False  # a known difference wins over an unknown
