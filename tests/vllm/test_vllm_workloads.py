"""The shared-prefix workload on real vLLM (CPU): the prefix reuse it implies stored beside vLLM's own
prefix-cache counters over the pass (issue 20 item 5; docs/workloads.md). One launch through the real CLI."""

from __future__ import annotations

import secrets

import duckdb
import pytest
from vllm_helpers import KEY_VAR, TINY_CONFIG, cli, launch_args, processes_using

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]

# vLLM on CPU keeps KV in 128-token blocks: a 600-token system prompt (+ its 2-token break, as Qwen2 counts
# "\n\n" after a word: 1 or 2) leaves 4 whole shared blocks per warm prompt.
SHARED = ("--set", "matrix.workload=shared-prefix", "--set", "matrix.contexts=[]", "--set", "matrix.prefill_contexts=[]",
          "--set", "workload.groups=2", "--set", "workload.prompts_per_group=4", "--set", "workload.system_tokens=600",
          "--set", "workload.question_tokens=100", "--set", "workload.output_tokens=8")  # fmt: skip


def test_shared_prefix_reuse_beside_vllms_own_counters(vllm_python, tiny_model, tmp_path) -> None:
    db = tmp_path / "wl.duckdb"
    key = "imx-" + secrets.token_hex(12)
    proc = cli("run", str(TINY_CONFIG), "--db", str(db), *launch_args(vllm_python, tiny_model), *SHARED, env={KEY_VAR: key}, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not processes_using(str(tiny_model))
    con = duckdb.connect(str(db), read_only=True)
    try:
        cols = [d[0] for d in con.execute("SELECT * FROM prefix_reuse").description]
        (row,) = [dict(zip(cols, r)) for r in con.execute("SELECT * FROM prefix_reuse").fetchall()]
        cold = con.execute("SELECT count(*) FROM workload_requests WHERE member = 0 AND expected_cached_tokens = 0").fetchone()[0]
    finally:
        con.close()
    print("vLLM shared-prefix:", row)
    assert row["status"] == "valid" and row["requests"] == 8 and cold == 2
    assert row["block_tokens"] == 128  # vLLM's own block size, read from vllm:cache_config_info
    assert row["engine_queries"] and row["engine_queries"] >= row["prompt_tokens"]  # vLLM's counters moved over the pass
    assert row["implied_reuse"] > 0.4
    # vLLM's cache served what the workload implied (it may serve more: nothing in this pass is evicted, and a
    # chat-free completion prompt shares exactly the system prompt's blocks).
    assert abs(row["engine_hit_rate"] - row["implied_reuse"]) <= 0.02, row
