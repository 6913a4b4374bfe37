"""Every .sql file of the store is applied at every open and upgrade (connect.SCHEMA_FILES), so every table, view
and macro they create exists in a fresh store, and a change to any of them comes with a SCHEMA_VERSION bump (an
older store then upgrades at its next open; tests/importer/test_import_schema_upgrade.py)."""

from __future__ import annotations

import hashlib
import re
from importlib import resources

import duckdb

from infermatrix.core.store import Store
from infermatrix.core.store.connect import SCHEMA_FILES, SCHEMA_VERSION

# The store's SQL (comments and white space left out) as of each version: a changed fingerprint without a new
# version means a store written before the change would be taken as current and never upgraded (issue 28: four
# files came in at v5 without a bump, and report code asked at run time whether their views existed).
FINGERPRINTS = {7: "ee12485b", 8: "86f7ac58", 9: "bef9daab", 10: "b0ff3341", 11: "6c181611", 12: "b4bbaa62", 13: "841545dd"}

_CREATE = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?(TABLE|VIEW|MACRO)\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.I)


def _sql(name: str) -> str:
    return resources.files("infermatrix.core.store").joinpath(name).read_text(encoding="utf-8")


def _code(sql: str) -> str:
    """The SQL without its comments (a -- outside a quoted string to the end of its line) and with white space folded."""
    out, quoted, i = [], False, 0
    while i < len(sql):
        ch = sql[i]
        if ch == "'":
            quoted = not quoted
        elif not quoted and sql.startswith("--", i):
            i = sql.find("\n", i)
            i = len(sql) if i < 0 else i
            continue
        out.append(ch)
        i += 1
    return " ".join("".join(out).split())


def fingerprint() -> str:
    text = "\n".join(f"{name}\n{_code(_sql(name))}" for name in SCHEMA_FILES)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def test_every_sql_file_is_applied():
    files = {p.name for p in resources.files("infermatrix.core.store").iterdir() if p.name.endswith(".sql")}
    assert files == set(SCHEMA_FILES) and len(SCHEMA_FILES) == len(files)


def test_a_change_to_the_sql_bumps_the_schema_version():
    assert FINGERPRINTS.get(SCHEMA_VERSION) == fingerprint(), (
        f"the store's SQL changed (fingerprint {fingerprint()}): bump SCHEMA_VERSION in connect.py with a comment naming "
        "what changed, extend tests/importer/test_import_schema_upgrade.py, and record the fingerprint here"
    )


def test_a_fresh_store_has_everything_every_file_creates(tmp_path):
    made = {(kind.upper(), name) for name in SCHEMA_FILES for kind, name in _CREATE.findall(_sql(name))}
    assert ("TABLE", "gpu_samples") in made and ("MACRO", "nearest_rank") in made
    path = tmp_path / "fresh.duckdb"
    Store(path).close()
    con = duckdb.connect(str(path), read_only=True)
    try:
        have = {("TABLE", r[0]) for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        have |= {("VIEW", r[0]) for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        have |= {("MACRO", r[0]) for r in con.execute("SELECT function_name FROM duckdb_functions() WHERE NOT internal").fetchall()}
    finally:
        con.close()
    assert made - have == set()


def test_deleting_a_run_takes_its_search_and_gpu_samples(store):
    """Every store has these tables now, so they are run tables: before, a deleted run left them behind."""
    from infermatrix.core.store.slo_search import save_probe, save_search
    from infermatrix.core.store.telemetry import save_gpu_samples

    keep, gone = store.create_run({"engine": "sim"}), store.create_run({"engine": "sim"})
    for rid in (keep, gone):
        save_search(store, rid, {"slo": "tpot_p99_ms=50", "over": "concurrency", "context_tokens": 1024, "status": "found"})
        save_probe(store, rid, {"probe": 0, "load": 4.0, "context_tokens": 1024, "verdict": "pass"})
        save_gpu_samples(store, rid, 1024, 4, [{"t": 1.0, "gpu": 0, "power_w": 300.0}])
    store.delete_run(gone)
    for table in ("slo_searches", "slo_search_probes", "gpu_samples"):
        assert store.query(f"SELECT DISTINCT run_id FROM {table}")[1] == [(keep,)], table
