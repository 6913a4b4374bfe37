"""Saving cells: one transaction, replacement on re-save, requests and loop evidence."""

from __future__ import annotations

import json

import pytest

from imx_factories import fill_run, make_cell
from infermatrix.core.measure import histograms as hdr
from infermatrix.core.store import Store, StoreError
from infermatrix.core.store.rows import EVIDENCE_TEXT_BYTES, PERCENTILE_GRID

CHILD_TABLES = ("requests", "histograms", "histogram_percentiles")


def counts(store, run_id, ctx, n):
    out = {}
    for t in ("cells",) + CHILD_TABLES:
        _, rows = store.query(
            f"SELECT count(*) FROM {t} WHERE run_id = ? AND context_tokens = ? AND concurrency = ?", [run_id, ctx, n]
        )
        out[t] = rows[0][0]
    return out


def expected_counts(c):
    return {
        "cells": 1,
        "requests": len(c.requests),
        "histograms": len(c.histograms),
        "histogram_percentiles": len(PERCENTILE_GRID) * sum(1 for e in c.histograms.values() if hdr.decode(e).get_total_count()),
    }


@pytest.fixture
def run_id(store):
    return store.create_run({"engine": "vllm", "model": "qwen"})


def test_save_cell_writes_everything(store, run_id):
    c, _ = make_cell(8192, 8)
    store.save_cell(run_id, c)
    assert counts(store, run_id, 8192, 8) == expected_counts(c)


def test_failure_mid_save_leaves_nothing(store, run_id):
    c, _ = make_cell(8192, 8)
    c.requests[3].stream_index = "not a number"  # DuckDB fails on the requests insert, after the cell row
    with pytest.raises(StoreError, match="could not save cell 8K x 8"):
        store.save_cell(run_id, c)
    assert counts(store, run_id, 8192, 8) == dict.fromkeys(("cells",) + CHILD_TABLES, 0)
    # the connection is usable afterwards (the transaction was rolled back, not left open)
    c.requests[3].stream_index = 3
    store.save_cell(run_id, c)
    assert counts(store, run_id, 8192, 8) == expected_counts(c)


def test_failure_in_last_insert_rolls_back_earlier_ones(store, run_id, monkeypatch):
    c, _ = make_cell(8192, 4)
    real = Store._bulk_insert

    def failing(self, table, columns, data):
        if table == "histogram_percentiles":  # the last statement: cell, requests, histograms already in
            raise RuntimeError("disk full")
        return real(self, table, columns, data)

    monkeypatch.setattr(Store, "_bulk_insert", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        store.save_cell(run_id, c)
    assert counts(store, run_id, 8192, 4) == dict.fromkeys(("cells",) + CHILD_TABLES, 0)


def test_failed_resave_keeps_previous_version(store, run_id):
    old, _ = make_cell(8192, 8)
    store.save_cell(run_id, old)
    new, _ = make_cell(8192, 8, scale=2.0, seed=9)
    new.histograms["ttft"] = b"not an hdr histogram"
    with pytest.raises(StoreError, match="not a valid HDR"):
        store.save_cell(run_id, new)
    assert counts(store, run_id, 8192, 8) == expected_counts(old)
    _, rows = store.query("SELECT total_tps FROM cells WHERE run_id = ?", [run_id])
    assert rows[0][0] == pytest.approx(old.total_tps)


def test_resave_replaces_cell_and_children(store, run_id):
    first, _ = make_cell(16384, 4)
    store.save_cell(run_id, first)
    second, lat = make_cell(16384, 4, status="error", reason="3 requests failed", seed=5)
    second.requests = second.requests[:3]
    second.histograms = {"ttft": hdr.histogram_of(lat.ttft[:2])}
    store.save_cell(run_id, second)
    assert counts(store, run_id, 16384, 4) == expected_counts(second)
    _, rows = store.query("SELECT status, reason FROM cells WHERE run_id = ?", [run_id])
    assert rows == [("error", "3 requests failed")]
    _, rows = store.query("SELECT count FROM histograms WHERE run_id = ?", [run_id])
    assert rows == [(2,)]


def test_request_rows(store, run_id):
    c, _ = make_cell(8192, 2)
    store.save_cell(run_id, c)
    cols, rows = store.query(
        "SELECT * FROM requests WHERE run_id = ? ORDER BY request_no", [run_id]
    )
    got = [dict(zip(cols, r)) for r in rows]
    assert len(got) == len(c.requests)
    for g, r in zip(got, c.requests):
        assert (g["stream_index"], g["seq"]) == (r.stream_index, r.seq)
        assert g["output_tokens"] == r.output_tokens
        assert g["chunks"] == len(r.events)
        assert g["ttft_ms"] == pytest.approx(r.ttft_s * 1000)
        assert g["outcome"] == r.outcome and g["finish_reason"] == r.finish_reason
        assert g["looped"] is False and g["text"] is None and g["loop_evidence"] is None


def test_loop_evidence_keeps_tail_of_text(store, run_id):
    c, _ = make_cell(32768, 4, status="looped", reason="loop")
    store.save_cell(run_id, c)
    looped = [r for r in c.requests if r.loop is not None]
    assert looped
    _, rows = store.query("SELECT text, loop_evidence FROM requests WHERE run_id = ? AND looped", [run_id])
    assert len(rows) == len(looped)
    text, evidence = rows[0]
    full = looped[0].text
    assert len(full.encode()) > EVIDENCE_TEXT_BYTES  # the fixture really needs truncating
    assert len(text.encode()) <= EVIDENCE_TEXT_BYTES
    assert full.endswith(text)
    ev = json.loads(evidence)
    assert ev["period_tokens"] == looped[0].loop.period_tokens
    assert ev["text_bytes"] == len(full.encode())


def test_multibyte_text_truncation_stays_valid_utf8(store, run_id):
    c, _ = make_cell(1024, 1, status="looped")
    r = next(r for r in c.requests if r.loop)
    r.text = "循環" * 3000
    store.save_cell(run_id, c)
    _, rows = store.query("SELECT text FROM requests WHERE looped AND run_id = ?", [run_id])
    assert r.text.endswith(rows[0][0]) and len(rows[0][0].encode()) <= EVIDENCE_TEXT_BYTES


def test_bad_status_and_unknown_run(store, run_id):
    c, _ = make_cell(1024, 1)
    c.status = "great"
    with pytest.raises(StoreError, match="unknown status 'great'"):
        store.save_cell(run_id, c)
    c.status = "valid"
    with pytest.raises(StoreError, match="no run 'nope'"):
        store.save_cell("nope", c)


def test_unknown_histogram_metric(store, run_id):
    c, lat = make_cell(1024, 1)
    c.histograms["p99"] = hdr.histogram_of(lat.ttft)
    with pytest.raises(StoreError, match="unknown histogram metric 'p99'"):
        store.save_cell(run_id, c)


def test_done_cells(store):
    run_id, cells, _ = fill_run(store)
    interrupted, _ = make_cell(131072, 1, status="interrupted")
    store.save_cell(run_id, interrupted)
    all_final = {k for k, (c, _) in cells.items()}
    assert store.done_cells(run_id) == all_final
    assert store.done_cells(run_id, retry_errors=True) == {k for k, (c, _) in cells.items() if c.status != "error"}
    assert store.done_cells("other") == set()
    assert store.done_prefill(run_id) == {p for p in {8192, 32768, 257024, 262144}}
