"""Parquet export and import: runs from several databases merge into one, row for row."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from imx_factories import fill_run, make_cell
from infermatrix.core.importer import import_page
from infermatrix.core.store import Store, StoreError
from infermatrix.core.store.parquet import MANIFEST, export_runs, import_runs
from infermatrix.core.store.points import save_point
from infermatrix.core.store.slo_search import save_probe, save_search
from infermatrix.core.store.telemetry import save_gpu_samples
from infermatrix.core.store.workload_store import save_workload_pass
from infermatrix.core.store.store import RUN_TABLES

ORDER = {
    "runs": "run_id", "prefill": "run_id, context_tokens", "cells": "run_id, context_tokens, concurrency",
    "prefill_samples": "run_id, context_tokens, sample_no", "prefill_interval_rows": "run_id, context_tokens, metric",
    "requests": "run_id, context_tokens, concurrency, request_no",
    "histograms": "run_id, context_tokens, concurrency, metric",
    "histogram_percentiles": "run_id, context_tokens, concurrency, metric, percentile",
    "slo_limits": "run_id, slo, metric, percentile", "run_costs": "run_id",
    "points": "run_id, point", "point_requests": "run_id, point, request_no",
    "workload_passes": "run_id", "workload_requests": "run_id, request_no", "task_requests": "run_id, request_no",
    "trace_points": "run_id, point", "trace_requests": "run_id, point, request_no", "bursts": "run_id, point", "interference_points": "run_id, point",
    "cell_host_stats": "run_id, context_tokens, concurrency, host", "cell_interval_rows": "run_id, context_tokens, concurrency, metric",
    "slo_searches": "run_id", "slo_search_probes": "run_id, probe", "gpu_samples": "run_id, context_tokens, concurrency, gpu, t",
    "cell_repeats": "run_id, context_tokens, concurrency, repeat",
    "cell_repeat_intervals": "run_id, context_tokens, concurrency, repeat, metric",
    "run_settings": "run_id, key",
    "engine_samples": "run_id, t_mono, metric, labels", "gpu_series": "run_id, t_mono, gpu", "telemetry_costs": "run_id, source",
}


def rows(store: Store, table: str, ids: list[str]) -> list[tuple]:
    skip = " EXCLUDE (imported_at)" if table == "runs" else ""
    return store.query(f"SELECT *{skip} FROM {table} WHERE list_contains(?, run_id) ORDER BY {ORDER[table]}", [ids])[1]


@pytest.fixture(scope="module")
def source_file(tmp_path_factory):
    """A database with two measured runs and the imported reference page (built once)."""
    path = tmp_path_factory.mktemp("parquet") / "source.duckdb"
    with Store(path) as s:
        a, _, _ = fill_run(s, seed=1)
        save_point(s, a, {"point": 0, "arrival": "poisson", "requested_rate": 2.0, "status": "valid", "lag_p99_ms": 3.5},
                   [{"request_no": i, "request_id": f"r{i}", "scheduled": float(i), "sent": i + 0.001} for i in range(3)])  # fmt: skip
        save_workload_pass(s, a, {"workload": "multi-turn", "status": "valid", "params": {"turns": 2}, "implied_reuse": 0.4},
                           [{"request_no": t, "conversation": 0, "turn": t + 1, "ttft_ms": 5.0 + t, "outcome": "ok", "reply": "a b",
                             "messages": [{"role": "user", "content": "x"}] * (t + 1),
                             **({"task_set": "builtin", "task_id": "b-1-0", "expected": "4", "extracted": "4", "correct": True} if t == 0 else {})}
                            for t in range(2)])  # fmt: skip  (a judged task's row travels too: task_requests)
        save_point(s, a, {"point": 1, "arrival": "trace", "status": "valid", "trace": {"format": "mooncake", "replayed": 2}},
                   [{"request_no": i, "request_id": f"t{i}", "trace_index": i, "shared_prefix_tokens": 512 * i} for i in range(2)])  # fmt: skip
        save_point(s, a, {"point": 2, "arrival": "burst", "status": "valid", "burst": {"requests": 2, "concurrency": 1, "tail_s": 0.5}},
                   [{"request_no": i, "request_id": f"b{i}", "ttfo_ms": 9.0 + i, "reasoning": True} for i in range(2)])  # a burst (issue 31)
        save_point(s, a, {"point": 3, "arrival": "mixed", "status": "valid", "mixed": {"decode_streams": 2, "stall_max_ms": 40.0}},
                   [{"request_no": i, "request_id": f"m{i}"} for i in range(3)])  # an interference point (issue 31 item 3)
        save_search(s, a, {"slo": "tpot_p99_ms=50", "over": "concurrency", "context_tokens": 8192, "status": "found", "highest_pass": 8.0})
        save_probe(s, a, {"probe": 0, "step": "start", "load": 8.0, "context_tokens": 8192, "status": "valid", "meets": True, "verdict": "pass"})
        save_gpu_samples(s, a, 8192, 8, [{"t": 1.0 + i, "t_mono": 1000.0 + i, "gpu": 0, "power_w": 400.0 + i} for i in range(3)])
        for r in (1, 2):  # a cell measured twice (matrix.repeat; issue 30): its repeats travel too
            c, _ = make_cell(512, 1, seed=r, intervals={"total_tps": (90.0, 110.0)})
            s.save_repeat(a, c, r, 2)
        b, _, _ = fill_run(s, {"engine": "sglang"}, scale=1.3, seed=2, other=False)
        ref = import_page(s, Path(__file__).parent / "data" / "vllm-h200x4-qwen3.8-flash-next.txt").run_id
    return path, [a, b, ref]


@pytest.fixture
def source(source_file, tmp_path):
    """A fresh copy of that database, open: (store, [run ids])."""
    path = tmp_path / "source.duckdb"
    shutil.copy(source_file[0], path)
    s = Store(path)
    yield s, list(source_file[1])
    s.close()


@pytest.mark.slow  # over a second of CPU (several runs written to DuckDB)
def test_round_trip_keeps_every_row(source, tmp_path):
    src, ids = source
    out = tmp_path / "export"
    manifest = export_runs(src, ids, out)
    assert sorted(manifest["runs"]) == sorted(ids) and json.loads((out / MANIFEST).read_text()) == manifest
    assert {p.name for p in out.iterdir()} == {MANIFEST, *(f"{t}.parquet" for t in RUN_TABLES)}
    with Store(tmp_path / "dest.duckdb") as dest:
        result = import_runs(dest, out)
        assert sorted((r.run_id, r.action) for r in result) == sorted((i, "added") for i in ids)
        for table in RUN_TABLES:
            assert rows(dest, table, ids) == rows(src, table, ids), table
            assert manifest["rows"][table] == len(rows(src, table, ids))
        for view in ("decode_matrix", "prefill_list", "latency_percentiles", "engine_comparison", "load_points", "prefix_reuse", "turns"):
            q = f"SELECT * FROM {view} ORDER BY ALL"
            assert dest.query(q)[1] == src.query(q)[1], view
        assert all(dest.get_run(i)["imported_at"] is not None for i in ids)


@pytest.mark.slow  # over a second of CPU (several runs written to DuckDB)
def test_merging_two_databases_and_importing_again(source, tmp_path):
    src, ids = source
    export_runs(src, ids[:1], tmp_path / "one")
    other = Store(tmp_path / "other.duckdb")
    c, _, _ = fill_run(other, {"engine": "trtllm"}, seed=9, other=False)
    export_runs(other, [c], tmp_path / "two")
    other.close()
    with Store(tmp_path / "merged.duckdb") as merged:
        import_runs(merged, tmp_path / "one")
        import_runs(merged, tmp_path / "two")
        assert sorted(r["run_id"] for r in merged.list_runs()) == sorted([ids[0], c])
        again = import_runs(merged, tmp_path / "one")
        assert [(r.run_id, r.action) for r in again] == [(ids[0], "skipped")]
        assert merged.query("SELECT count(DISTINCT run_a) FROM engine_comparison")[1] == [(2,)]


def test_same_id_different_run_needs_replace(source, tmp_path):
    src, ids = source
    export_runs(src, ids[:1], tmp_path / "x")
    with Store(tmp_path / "dest.duckdb") as dest:
        dest.create_run({"run_id": ids[0], "engine": "something else"})
        with pytest.raises(StoreError, match="--replace"):
            import_runs(dest, tmp_path / "x")
        assert dest.get_run(ids[0])["engine"] == "something else"  # nothing changed
        assert [r.action for r in import_runs(dest, tmp_path / "x", replace=True)] == ["replaced"]
        for table in RUN_TABLES:
            assert rows(dest, table, ids[:1]) == rows(src, table, ids[:1]), table


def test_export_from_an_older_schema_still_imports(source, tmp_path):
    src, ids = source
    out = tmp_path / "old"
    export_runs(src, ids[:1], out)
    runs = out / "runs.parquet"
    con = duckdb.connect()
    con.execute(f"COPY (SELECT * EXCLUDE (source, imported_at) FROM read_parquet('{runs}')) TO '{out / 'r2.parquet'}' (FORMAT parquet)")
    con.close()
    (out / "r2.parquet").replace(runs)
    with Store(tmp_path / "dest.duckdb") as dest:
        import_runs(dest, out)
        assert dest.get_run(ids[0])["source"] is None and dest.get_run(ids[0])["engine"] == src.get_run(ids[0])["engine"]


def test_bad_directories_are_refused(source, tmp_path):
    src, ids = source
    with Store(tmp_path / "dest.duckdb") as dest:
        with pytest.raises(StoreError, match="not an infermatrix export"):
            import_runs(dest, tmp_path)
        out = tmp_path / "e"
        export_runs(src, ids[:2], out)
        with pytest.raises(StoreError, match="already holds an export"):
            export_runs(src, ids[:1], out)
        export_runs(src, ids[:1], out, force=True)  # overwriting on request
        manifest = json.loads((out / MANIFEST).read_text())
        (out / MANIFEST).write_text(json.dumps({**manifest, "runs": ids[:2]}))
        with pytest.raises(StoreError, match="does not hold the runs its manifest lists"):
            import_runs(dest, out)
        (out / "cells.parquet").unlink()
        with pytest.raises(StoreError, match="missing cells.parquet"):
            import_runs(dest, out)
        (out / MANIFEST).write_text(json.dumps({**manifest, "schema_version": 99}))
        with pytest.raises(StoreError, match="newer infermatrix"):
            import_runs(dest, out)
        assert dest.list_runs() == []
    with pytest.raises(StoreError, match="no run matches"):
        export_runs(src, ["ffffffff"], tmp_path / "z")


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infermatrix", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})


@pytest.mark.slow  # starts a process
def test_cli_export_and_import(source, tmp_path):
    src, ids = source
    path = src.path
    src.close()  # the CLI is another process: DuckDB lets one process hold the file
    out = tmp_path / "cli-export"
    done = cli("export", "--all", "--parquet", str(out), "--db", path, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"exported {len(ids)} run(s)" in done.stdout
    dest = str(tmp_path / "cli-dest.duckdb")
    done = cli("import", str(out), "--db", dest, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert all(f"added run {i}" in done.stdout for i in ids)
    done = cli("import", str(out), "--db", dest, cwd=tmp_path)
    assert all(f"skipped run {i}" in done.stdout for i in ids)
    refused = cli("export", ids[0], "--parquet", str(out), "--db", path, cwd=tmp_path)
    assert refused.returncode == 2 and "already holds an export" in refused.stderr
