"""Runs: create/update/finish, lookups by prefix, and run_info from engine facts."""

from __future__ import annotations

import datetime as dt

import duckdb

import pytest

from infermatrix.core.store import RUN_COLUMNS, Store, StoreError, run_info
from infermatrix.core.types import Capacity, EngineInfo


def test_create_and_get_run(store):
    info = {
        "engine": "vllm",
        "engine_version": "0.11",
        "model": "qwen",
        "hardware": {"gpu": "H200", "gpu_count": 4},
        "config": {"matrix": {"duration_s": 5.0}},
        "kv_tokens": 1_234_567,
        "started_at": 1_700_000_000.0,
    }
    run_id = store.create_run(info)
    assert len(run_id) == 8 and int(run_id, 16) >= 0
    run = store.get_run(run_id)
    assert set(run) == set(RUN_COLUMNS)
    assert run["hardware"] == info["hardware"] and run["config"] == info["config"]
    assert run["kv_tokens"] == info["kv_tokens"]
    assert run["status"] == "running"
    assert run["started_at"] == dt.datetime.fromtimestamp(info["started_at"], dt.UTC).replace(tzinfo=None)
    assert store.get_run("missing") is None


def test_given_run_id_and_duplicates(store):
    assert store.create_run({"run_id": "abc", "engine": "x"}) == "abc"
    with pytest.raises(StoreError, match="already exists"):
        store.create_run({"run_id": "abc", "engine": "x"})


def test_unknown_field_and_status(store):
    with pytest.raises(StoreError, match="unknown run field.*enigne"):
        store.create_run({"enigne": "x"})
    with pytest.raises(StoreError, match="unknown run status"):
        store.create_run({"engine": "x", "status": "done"})
    run_id = store.create_run({"engine": "x"})
    with pytest.raises(StoreError, match="unknown run status"):
        store.finish_run(run_id, "ok")
    with pytest.raises(StoreError, match="no run"):
        store.update_run("zzz", notes="x")


def test_update_and_finish(store):
    run_id = store.create_run({"engine": "x"})
    store.update_run(run_id, engine_version="1.2", hardware={"gpu": "A100"}, notes="warm")
    store.finish_run(run_id, "interrupted")
    run = store.get_run(run_id)
    assert (run["engine_version"], run["hardware"], run["notes"], run["status"]) == ("1.2", {"gpu": "A100"}, "warm", "interrupted")
    assert run["finished_at"] is not None and run["finished_at"] >= run["started_at"]


def test_latest_and_resolve(store):
    with pytest.raises(StoreError, match="no runs"):
        store.resolve_run(None)
    assert store.latest_run_id() is None
    t = 1_700_000_000
    store.create_run({"run_id": "abc123", "engine": "x", "started_at": t})
    store.create_run({"run_id": "abd456", "engine": "x", "started_at": t + 10})
    store.create_run({"run_id": "abc", "engine": "x", "started_at": t + 5})
    assert store.latest_run_id() == "abd456"
    assert store.resolve_run(None) == "abd456"
    assert store.resolve_run("abd") == "abd456"
    assert store.resolve_run("abc") == "abc"  # exact id wins over being a prefix of abc123
    assert store.resolve_run("abc1") == "abc123"
    with pytest.raises(StoreError, match="ambiguous.*abc123"):
        store.resolve_run("ab")
    with pytest.raises(StoreError, match="no run matches 'q'"):
        store.resolve_run("q")


def test_list_runs(store):
    store.create_run({"run_id": "r1", "engine": "x", "started_at": 1_700_000_000})
    store.create_run({"run_id": "r2", "engine": "y", "started_at": 1_700_000_100})
    assert [r["run_id"] for r in store.list_runs()] == ["r2", "r1"]


def test_query(store):
    cols, rows = store.query("SELECT 1 AS one, ? AS two", [2])
    assert cols == ["one", "two"] and rows == [(1, 2)]
    assert store.query("CREATE TEMP TABLE t(x INTEGER)")[1] == []  # DDL: no rows
    with pytest.raises(StoreError, match="(?i)parser error|syntax") as err:
        store.query("SELEC 1")
    assert isinstance(err.value, duckdb.Error)  # callers catching DuckDB's errors still catch it


def test_read_only_store_refuses_writes(db_path):
    with Store(db_path) as s:
        s.create_run({"run_id": "r1", "engine": "x"})
    with Store(db_path, read_only=True) as s:
        assert s.get_run("r1")["engine"] == "x"
        with pytest.raises(StoreError, match="read-only"):
            s.create_run({"engine": "y"})


def test_closed_store(db_path):
    s = Store(db_path)
    s.close()
    s.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        s.query("SELECT 1")


def test_run_info_from_engine_and_config(store):
    engine = EngineInfo(engine="vllm", model="qwen", version="0.11", max_model_len=262144,
                        launch_command="vllm serve x --api-key <redacted>", hardware={"gpu": "H200"},
                        extra={"quantization": "BF16"})
    capacity = Capacity(kv_tokens=1_000_000, max_seqs=256, source="vllm:cache_config_info")
    config = {"name": "nightly", "matrix": {"api": "chat", "prompt_mode": "shared", "duration_s": 30.0, "max_output": 512},
              "hardware": {"gpu_count": 4}}
    info = run_info(engine, capacity, config, notes="n")
    run_id = store.create_run(info)
    run = store.get_run(run_id)
    assert run["engine"] == "vllm" and run["engine_version"] == "0.11" and run["max_model_len"] == 262144
    assert run["kv_tokens"] == 1_000_000 and run["max_seqs"] == 256 and run["capacity_source"] == "vllm:cache_config_info"
    assert run["api"] == "chat" and run["prompt_mode"] == "shared" and run["duration_s"] == 30.0 and run["max_output"] == 512
    assert run["hardware"] == {"gpu": "H200", "gpu_count": 4}
    assert run["engine_extra"] == {"quantization": "BF16"}
    assert run["name"] == "nightly" and run["notes"] == "n" and run["config"] == config
    assert run["tool_version"].startswith("infermatrix ")


def test_run_dir_next_to_database(store, db_path):
    run_id = store.create_run({"engine": "x"})
    d = store.run_dir(run_id)
    assert d.is_dir() and d.name == run_id
    assert d.parent == db_path.with_name(db_path.stem + ".runs")
    assert store.run_dir(run_id) == d  # idempotent
    with Store(":memory:") as mem:
        assert mem.run_dir("abc").is_dir()


def test_finish_run_with_error(store):
    run_id = store.create_run({"engine": "x"})
    store.finish_run(run_id, "failed", error="engine died: exit code 1")
    run = store.get_run(run_id)
    assert (run["status"], run["error"]) == ("failed", "engine died: exit code 1")


def test_notes_dict_is_stored_as_json_text(store):
    run_id = store.create_run({"engine": "x"})
    store.update_run(run_id, notes={"tokenizer": "server /tokenize"})
    import json

    assert json.loads(store.get_run(run_id)["notes"]) == {"tokenizer": "server /tokenize"}
