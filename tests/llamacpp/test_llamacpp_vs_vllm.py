"""Engines as equals, for real: a llama.cpp run beside a vLLM run of the same tiny model (same
tokenizer, same matrix, same prompts) in one DuckDB, and ``infermatrix compare`` lines them up cell
by cell with no method warning — the two were measured the same way."""

from __future__ import annotations

import shutil

import duckdb
import pytest
from llamacpp_helpers import TINY_CONFIG, cli, launch_args, processes_using
from vllm_run_once import SHORT, shared_vllm_run

pytestmark = [pytest.mark.llamacpp, pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def both(vllm_python, llama_server, tiny_gguf, request, tmp_path_factory):
    # vLLM's run is the suite's one (tests/vllm_run_once.py: made by whichever of this module and the vLLM end-to-end
    # tests comes first, from the tiny model the GGUF was written from); llama.cpp's run lands in a copy of its database.
    v = shared_vllm_run(request.config, tmp_path_factory, vllm_python)
    assert v["returncode"] == 0, f"vLLM run failed:\n{v['stderr'][-3000:]}"
    db = tmp_path_factory.mktemp("engines") / "both.duckdb"
    shutil.copyfile(v["db"], db)
    tiny_model = v["model_dir"]
    lc = cli("run", str(TINY_CONFIG), "--db", str(db), *launch_args(llama_server, tiny_gguf, *SHORT), timeout=540)
    assert lc.returncode == 0, f"llama.cpp run failed:\n{lc.stderr[-3000:]}"
    assert processes_using(str(tiny_gguf)) == [] and processes_using(str(tiny_model)) == []
    with duckdb.connect(str(db), read_only=True) as con:
        runs = dict(con.execute("SELECT engine, run_id FROM runs").fetchall())
        for row in con.execute("SELECT r.engine, c.context_tokens, c.concurrency, c.status, c.reason FROM cells c JOIN runs r USING (run_id) "
                               "WHERE c.status NOT IN ('valid', 'over_capacity')").fetchall():  # fmt: skip
            print("not valid:", row)  # shown with -s: why a cell has no numbers on this machine
    return db, runs


def test_same_prompts_counted_the_same_by_both_engines(both):
    db, runs = both
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "SELECT a.context_tokens, a.concurrency, a.prompt_tokens, b.prompt_tokens FROM cells a JOIN cells b "
            "USING (context_tokens, concurrency) WHERE a.run_id = ? AND b.run_id = ? AND a.status <> 'over_capacity'",
            [runs["vllm"], runs["llamacpp"]],
        ).fetchall()
        sources = con.execute(
            "SELECT r.engine, list_distinct(list(c.token_source)), r.kv_tokens, r.max_seqs FROM runs r JOIN cells c USING (run_id) "
            "WHERE c.status <> 'over_capacity' GROUP BY ALL ORDER BY 1"
        ).fetchall()
        prefill = con.execute(
            "SELECT a.context_tokens, a.prompt_tokens, b.prompt_tokens FROM prefill a JOIN prefill b USING (context_tokens) "
            "WHERE a.run_id = ? AND b.run_id = ?", [runs["vllm"], runs["llamacpp"]],
        ).fetchall()  # fmt: skip
    assert len(rows) == 9 and len(prefill) == 3
    # each server's own usage.prompt_tokens; llama-server sends it only with a request's last chunk,
    # so a cell whose requests were all cut at the window's end has none
    counted = [(ctx, n, a, b) for ctx, n, a, b in rows if b is not None]
    assert counted and all(a == b for _, _, a, b in counted), rows
    # cold prompts of exactly the asked length (a probe that failed on this machine has no count)
    probes = [(ctx, a, b) for ctx, a, b in prefill if a is not None and b is not None]
    assert probes and all(a == b == ctx for ctx, a, b in probes), prefill
    assert sources == [("llamacpp", ["usage"], 6144, 8), ("vllm", ["usage"], 6144, 8)]


def test_compare_shows_both_with_no_method_warning(both):
    db, runs = both
    proc = cli("compare", runs["vllm"], runs["llamacpp"], "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    print(out)
    assert "vllm" in out and "llamacpp" in out
    assert "No cells valid in both runs" not in out  # cells line up, with numbers for both engines
    assert "method differs" not in out and "Not recorded" not in out
    md = cli("compare", runs["vllm"], runs["llamacpp"], "--db", str(db), "--format", "markdown")
    assert md.returncode == 0 and "method differs" not in md.stdout, md.stderr
