"""HDR histograms: encoding, and the percentiles SQL reads back (view and macro)."""

from __future__ import annotations

import pytest

from imx_factories import fill_run, make_cell
from infermatrix.core.measure import histograms as hdr
from infermatrix.core.contexts import format_context
from infermatrix.core.store.rows import PERCENTILE_GRID, SUMMARY_PERCENTILES

# HDR with 3 significant digits reports the top of a bucket no wider than 1/1024 of the value.
REL = 1 / 1000


def exact_ms(values_s: list[float], p: float) -> float:
    """The percentile HdrHistogram defines (rank max(1, round(p% x n))), from raw values rounded to µs."""
    us = sorted(min(max(int(round(v * 1e6)), 1), hdr.HIGHEST_US) for v in values_s)
    if p >= 100:
        return us[-1] / 1000
    rank = max(1, int(p / 100 * len(us) + 0.5))
    return us[rank - 1] / 1000


def assert_hdr_close(got_ms: float, want_ms: float) -> None:
    # never below the true value (HDR reports the bucket's highest equivalent value), at most 0.1 % + 1 µs above
    assert want_ms - 1e-9 <= got_ms <= want_ms * (1 + REL) + 0.001, (got_ms, want_ms)


def test_histogram_roundtrip_and_percentile():
    values = [0.001 * i for i in range(1, 1001)]  # 1 ms ... 1 s
    enc = hdr.histogram_of(values)
    assert isinstance(enc, bytes)
    h = hdr.decode(enc)
    assert h.get_total_count() == len(values)
    assert hdr.decode(enc.decode("ascii")).get_total_count() == len(values)
    for p in (1, 50, 90, 99, 99.9, 100):
        assert_hdr_close(hdr.percentile(enc, p), exact_ms(values, p))


def test_histogram_clamps_out_of_range_and_skips_none():
    enc = hdr.histogram_of([0.0, 1e-9, None, 7200.0])
    h = hdr.decode(enc)
    assert h.get_total_count() == 3  # clamped, not dropped
    assert hdr.percentile(enc, 100) >= 3600 * 1000 * (1 - REL)
    assert hdr.percentile(enc, 0) <= 0.001 + 1e-9


def test_empty_histogram_percentile_is_nan():
    enc = hdr.histogram_of([])
    assert hdr.decode(enc).get_total_count() == 0
    assert hdr.percentile(enc, 50) != hdr.percentile(enc, 50)  # nan


def test_values_at_matches_value_at():
    enc = hdr.histogram_of([0.0001 * (i % 977 + 1) for i in range(5000)])
    h = hdr.decode(enc)
    many = hdr.values_at(h, PERCENTILE_GRID)
    assert many == {p: hdr.value_at(h, p) for p in PERCENTILE_GRID}


def test_latency_percentiles_view_matches_raw_values(store):
    run_id, cells, _ = fill_run(store)
    cols, rows = store.query("SELECT * FROM latency_percentiles WHERE run_id = ?", [run_id])
    got = {(r[1], r[2], r[3]): dict(zip(cols, r)) for r in rows}
    valid = {k: v for k, v in cells.items() if v[0].status == "valid"}
    assert len(got) == 3 * len(valid)  # ttft, tbt, e2e for each valid cell, nothing else
    names = {50.0: "p50", 90.0: "p90", 99.0: "p99", 99.9: "p999", 100.0: "max"}
    assert set(names) == set(SUMMARY_PERCENTILES)
    for (ctx, n), (_, lat) in valid.items():
        for metric in ("ttft", "tbt", "e2e"):
            raw = getattr(lat, metric)
            row = got[(format_context(ctx), n, metric)]
            for p, col in names.items():
                assert_hdr_close(row[col], exact_ms(raw, p))


def test_histograms_table_counts_and_encoding(store):
    run_id, cells, _ = fill_run(store)
    _, rows = store.query("SELECT context_tokens, concurrency, metric, unit, count, encoded FROM histograms WHERE run_id = ?", [run_id])
    assert rows
    for ctx, n, metric, unit, count, encoded in rows:
        c, lat = cells[(ctx, n)]
        assert unit == "us"
        assert count == len(getattr(lat, metric))
        assert encoded.encode("ascii") == c.histograms[metric]  # stored verbatim, decodable later


def test_latency_at_macro(store):
    run_id, cells, _ = fill_run(store)
    ctx, n = 8 * 1024, 8
    c, lat = cells[(ctx, n)]
    h = hdr.decode(c.histograms["ttft"])
    for asked, grid_point in [(95, 95.0), (42.5, 43.0), (99.9, 99.9), (99.95, 99.99), (99.991, 100.0), (0, 0.0)]:
        _, rows = store.query("SELECT latency_at(?, ?, ?, 'ttft', ?)", [run_id, ctx, n, asked])
        assert rows[0][0] == pytest.approx(hdr.value_at(h, grid_point) / 1000), asked
    # above 100 there is no stored point
    assert store.query("SELECT latency_at(?, ?, ?, 'ttft', 101)", [run_id, ctx, n])[1] == [(None,)]
    # the macro also reads non-valid cells (evidence), which the view leaves out
    looped = next(k for k, (cc, _) in cells.items() if cc.status == "looped")
    _, rows = store.query("SELECT latency_at(?, ?, ?, 'e2e', 50)", [run_id, *looped])
    assert_hdr_close(rows[0][0], exact_ms(cells[looped][1].e2e, 50))


def test_empty_histogram_is_stored_without_percentiles(store):
    run_id = store.create_run({"engine": "x", "model": "m"})
    c, _ = make_cell(1024, 1)
    c.histograms["e2e"] = hdr.histogram_of([])
    store.save_cell(run_id, c)
    _, rows = store.query("SELECT count FROM histograms WHERE run_id = ? AND metric = 'e2e'", [run_id])
    assert rows == [(0,)]
    _, rows = store.query("SELECT count(*) FROM histogram_percentiles WHERE run_id = ? AND metric = 'e2e'", [run_id])
    assert rows == [(0,)]


def test_itl_metric_is_stored(store):
    run_id = store.create_run({"engine": "x", "model": "m"})
    c, lat = make_cell(2048, 2)
    gaps = [b - a for a, b in zip(lat.e2e, lat.e2e[1:]) if b > a] or [0.01]
    c.histograms["itl"] = hdr.histogram_of(gaps)
    store.save_cell(run_id, c)
    _, rows = store.query("SELECT metric FROM latency_percentiles WHERE run_id = ?", [run_id])
    assert [r[0] for r in rows] == ["ttft", "tbt", "e2e", "itl"]
    _, rows = store.query("SELECT p50 FROM latency_percentiles WHERE run_id = ? AND metric = 'itl'", [run_id])
    assert_hdr_close(rows[0][0], exact_ms(gaps, 50))
