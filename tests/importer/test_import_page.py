"""Importing a published page: every number lands in the store as printed, and the report of the
imported run prints the page's own tables back (so nothing was misread)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infermatrix.core.importer import PageError, import_page, page_run_id, parse_page
from infermatrix.core.report import load_report, render_markdown
from infermatrix.core.report.layout import matrix_cell
from infermatrix.core.store import Store, StoreError

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "reference" / "vllm-h200x4-qwen3.8-flash-next.txt"


def page_long_rows(text: str) -> list[str]:
    """The page's All measurements rows, as lines (the simplest possible reading)."""
    return [line.strip() for line in text.splitlines() if re.match(r"^\| (Prefill|Sustained decode) \|", line.strip())]


def discarded_as_dashes(line: str) -> str:
    """The page prints a looped cell's completed requests and output tokens as 0; infermatrix's
    views hide every number of a discarded cell (DESIGN §4), so its report prints dashes there."""
    cells = line.strip("|").split("|")
    if cells[3].strip() == "Looped":
        cells = [" — " if i in (9, 10) and c.strip() == "0" else c for i, c in enumerate(cells)]
    return "|" + "|".join(cells) + "|"


def page_matrix(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^\| (\d+K) \| (.*) \|$", line.strip())
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def test_report_of_the_import_prints_the_pages_long_table(store, page_path, page_text):
    rid = import_page(store, page_path).run_id
    md = render_markdown(store, rid)
    ours = [line for line in md.splitlines() if re.match(r"^\| (Prefill|Sustained decode) \|", line)]
    assert ours == [discarded_as_dashes(line) for line in page_long_rows(page_text)]
    assert sum(a != b for a, b in zip(ours, page_long_rows(page_text))) == 1  # the 32K x 64 Looped row only


def test_matrix_and_prefill_list_as_on_the_page(store, page_path, page_text):
    rid = import_page(store, page_path).run_id
    d = load_report(store, rid)
    matrix = page_matrix(page_text)
    assert list(matrix) == [r["context_label"] for r in d.decode if r["concurrency"] == d.concurrencies[0]]
    for label, cells in matrix.items():
        ctx = next(r["context_tokens"] for r in d.decode if r["context_label"] == label)
        for n, shown in zip(d.concurrencies, cells):
            first, second, _ = matrix_cell(d, d.cell(ctx, n))
            assert first + (second or "") == shown  # the page glues tok/s to TTFT: "224.2154 ms TTFT"
    prefill = re.findall(r"(\d+K) context(\S+?)([\d,]+ ms) TTFT", page_text)
    assert [(p["context_label"], p["prompt_tps"], p["ttft_ms"]) for p in d.prefill] == [
        (label, float(tps[:-1]) * 1000, float(ms[:-3].replace(",", ""))) for label, tps, ms in prefill
    ]
    assert all(p["prompt_tokens"] is None for p in d.prefill)  # the page does not say


def test_run_fields_from_the_page(store, page_path, page_text):
    rid = import_page(store, page_path).run_id
    run = store.get_run(rid)
    section = page_text.split("Launch command", 1)[1].strip().splitlines()[0]
    command = section[: -len("Prefill")] if section.endswith("Prefill") else section
    assert run["launch_command"] == command
    assert run["max_model_len"] == int(re.search(r"--max-model-len (\d+)", command).group(1))
    pairs = dict(re.findall(r"^- (.+)\n-? ?(.+)$", page_text, re.M))
    assert (run["engine"], run["engine_version"], run["model"]) == (pairs["Engine"], pairs["Version"], pairs["Served model"])
    assert run["hardware"]["gpu"] == pairs["GPU"] and run["hardware"]["gpu_count"] == int(pairs["GPU count"])
    assert run["engine_extra"]["quantization"] == pairs["Quantization"]
    assert run["duration_s"] == float(pairs["Time per measurement"].split()[0])
    assert run["max_output"] == int(pairs["Max output"].split()[0].replace(",", ""))
    assert run["tool_version"] == pairs["Benchmark tool"]
    assert run["status"] == "imported" and run["started_at"] is None and run["imported_at"] is not None
    assert page_path.name in run["source"]
    assert run["api"] is None and run["prompt_mode"] is None and run["kv_tokens"] is None  # not on the page
    md = render_markdown(store, rid)
    assert "not published" in md and page_text.splitlines()[1].split(" on ")[0] in md.splitlines()[2]


@pytest.mark.slow  # over a second of CPU (several runs written to DuckDB)
def test_importing_twice_finds_the_first_import(store, page_path, page_text):
    first = import_page(store, page_path)
    again = import_page(store, page_path)
    assert first.created and not again.created and again.run_id == first.run_id == page_run_id(page_text)
    assert store.query("SELECT count(*) FROM runs")[1] == [(1,)]
    before = store.get_run(first.run_id)["imported_at"]
    replaced = import_page(store, page_path, replace=True)
    assert replaced.created and store.get_run(first.run_id)["imported_at"] >= before
    n_cells = store.query("SELECT count(*) FROM cells")[1][0][0]
    assert n_cells == len(parse_page(page_text).decode)
    assert page_run_id(page_text.replace("\n", "\r\n  ")) == page_run_id(page_text)


def test_page_without_long_table_reads_the_glued_matrix(tmp_path, page_text):
    full = parse_page(page_text)
    short = parse_page(page_text.split("All measurements", 1)[0])
    assert not short.has_long_table
    assert [(r.context_tokens, r.concurrency, r.status, r.total_tps, r.ttft_ms) for r in short.decode] == [
        (r.context_tokens, r.concurrency, r.status, r.total_tps, r.ttft_ms) for r in full.decode
    ]
    assert [(r.context_tokens, r.total_tps, r.ttft_ms) for r in short.prefill] == [
        (r.context_tokens, r.total_tps, r.ttft_ms) for r in full.prefill
    ]


@pytest.mark.parametrize("edit, message", [
    (lambda t: "Some other page\n" + t, "not a published benchmark page"),
    (lambda t: t.replace("| Sustained decode | 8K | 2 | Valid | 404.6 |", "| Sustained decode | 8K | 2 | Valid | 404.6 | 1 |"), "cells"),
    (lambda t: t.replace("| Sustained decode | 8K | 2 | Valid | 404.6 |", "| Sustained decode | 8K | 2 | Valid | 405.6 |"), "disagree"),
    (lambda t: t.replace("| Sustained decode | 32K | 64 | Looped |", "| Sustained decode | 32K | 64 | Exploded |"), "unknown status"),
    (lambda t: t.replace("| Sustained decode | 8K | 1 | Valid | 224.2 | 225.7 |", "| Sustained decode | 8K | 1 | Valid | 224.2 | fast |"), "not a number"),
])
def test_misread_pages_are_refused(page_text, edit, message):
    changed = edit(page_text)
    assert changed != page_text
    with pytest.raises(PageError, match=message):
        parse_page(changed)


def test_nothing_is_kept_when_saving_fails(store, page_path, monkeypatch):
    calls = {"n": 0}
    real = Store._cell_statements

    def failing_fifth(run_id, cell):  # the 5th cell's insert fails inside the transaction
        calls["n"] += 1
        return [("INSERT INTO no_such_table VALUES (1)", [])] if calls["n"] == 5 else real(run_id, cell)

    monkeypatch.setattr(Store, "_cell_statements", staticmethod(failing_fifth))
    with pytest.raises(StoreError, match="no_such_table"):
        import_page(store, page_path)
    assert calls["n"] > 5
    assert store.query("SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM cells), (SELECT count(*) FROM prefill)")[1] == [(0, 0, 0)]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "infermatrix", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})


@pytest.mark.slow  # starts a process
def test_cli_import(tmp_path, page_path, page_text):
    db = str(tmp_path / "cli.duckdb")
    first = cli("import", str(page_path), "--db", db, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    rid = page_run_id(page_text)
    assert f"imported run {rid}" in first.stdout
    valid = sum(1 for r in parse_page(page_text).decode if r.status == "valid")
    assert f"({valid} valid)" in first.stdout
    again = cli("import", str(page_path), "--db", db, cwd=tmp_path)
    assert again.returncode == 0 and f"already imported as run {rid}" in again.stdout
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    refused = cli("import", str(bad), "--db", db, cwd=tmp_path)
    assert refused.returncode == 2 and "not a published benchmark page" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    missing = cli("import", str(tmp_path / "nope.txt"), "--db", db, cwd=tmp_path)
    assert missing.returncode == 2 and "no such file" in missing.stderr


@pytest.mark.skipif(not SHARED.exists(), reason="no ../shared/reference in this checkout")
def test_fixture_is_the_shared_reference(page_text):
    assert SHARED.read_text(encoding="utf-8") == page_text
