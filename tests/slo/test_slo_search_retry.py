"""A concurrency probe the client could not deliver is measured again (``search.client_retries``; docs/load.md,
"Search"), over a real DuckDB file and the real search: each probe's decode cell is built here — what the client would
have measured — and saved through the store, so the SLO views judge its stored requests. A cell ``client_bound`` at
its first try and ``valid`` at its second is one probe, judged on the second; the stored reason keeps the first. The
rate path, with a real sim, is tests/slo/test_slo_search_sim.py."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
from rich.console import Console

from infermatrix.core.load.context import RunContext
from infermatrix.core.load.search import run_search
from infermatrix.core.plugins import get_plugin_manager
from infermatrix.core.registry import validate_config
from infermatrix.core.report.slo_report import load_slo_report, slo_tables
from infermatrix.core.store import Store
from infermatrix.core.types import CellResult, RequestRecord

W0, W1 = 100.0, 110.0  # every cell's window (monotonic seconds)
STEP_S = {1: 0.010, 2: 0.020, 3: 0.030, 4: 0.040}  # each N's token gap: TPOT 10·N ms
LIMIT_MS = 25.0  # so N = 1, 2 meet the SLO, N = 3, 4 do not


def _cell(n: int, status: str) -> CellResult:
    """N streams' requests inside the window, one token every STEP_S[n] s."""
    reqs = []
    for i in range(n):
        r = RequestRecord(stream_index=i, seq=0, sent=W0 + 0.1 * i, outcome="ok", finish_reason="length", first_token=W0 + 0.1 * i + 0.05)
        r.events = [(r.first_token + k * STEP_S[n], 1) for k in range(50)]
        r.ended = r.events[-1][0]
        reqs.append(r)
    reason = "stamps held by stalls (3.0 % of their spans)" if status == "client_bound" else None
    return CellResult(context_tokens=256, concurrency=n, status=status, reason=reason, total_tps=100.0, per_request_tps=50.0,
                      avg_active=float(n), completed=n, output_tokens=50 * n, measured_s=W1 - W0, window_start=W0, window_end=W1,
                      requests=reqs)  # fmt: skip


@pytest.mark.anyio
@pytest.mark.parametrize("retries", [1, 0])
async def test_a_client_bound_concurrency_probe_is_measured_again_and_judged_on_its_second_try(tmp_path, retries):
    cfg = validate_config(get_plugin_manager(load_entrypoints=False), {
        "engine": {"kind": "openai", "base_url": "http://127.0.0.1:9"}, "matrix": {"contexts": [256], "concurrency": []},
        "search": {"slo": f"tpot_p50_ms={LIMIT_MS:g}", "over": "concurrency", "context": 256, "client_retries": retries},
    })  # fmt: skip
    measured: list[int] = []
    with Store(tmp_path / "retry.duckdb") as store:
        run_id = store.create_run({"engine": "openai"})

        async def decode_cell(progress, ctx: int, n: int) -> None:
            measured.append(n)  # N = 2's first try is the client's; every other try valid
            store.save_cell(run_id, _cell(n, "client_bound" if measured.count(2) == 1 and n == 2 else "valid"))

        steps = SimpleNamespace(console=Console(file=open(tmp_path / "out.txt", "w"), width=200))
        shown = SimpleNamespace(total=0)  # the progress display's step count
        rc = RunContext(cfg=cfg, store=store, run_id=run_id, steps=steps, runner=None, workload=None, capacity=None,  # type: ignore[arg-type]
                        max_model_len=None, live=lambda k: contextlib.nullcontext(shown), count=lambda status: None,
                        decode_cell=decode_cell)  # fmt: skip
        await run_search(rc, retry_errors=False)
        cols, found = store.query("SELECT * FROM slo_search WHERE run_id = ?", [run_id])
        search = dict(zip(cols, found[0]))
        cols, found = store.query("SELECT probe, load, status, verdict, reason, tries FROM slo_search_probes WHERE run_id = ? ORDER BY probe", [run_id])
        probes = [dict(zip(cols, r)) for r in found]
        cols, found = store.query("SELECT concurrency, status FROM cells WHERE run_id = ? ORDER BY concurrency", [run_id])
        cells = dict(found)
        (caption,) = [t.caption for t in slo_tables(load_slo_report(store, [run_id])) if t.title == "SLO search probes"]
    steps.console.file.close()
    said = (tmp_path / "out.txt").read_text()
    if retries:
        assert measured == [1, 2, 2, 4, 3]  # N = 2 twice: the try the client could not deliver and the retry
        assert (search["status"], search["highest_pass"], search["lowest_fail"]) == ("found", 2, 3), search
        assert probes[1]["verdict"] == "pass" and probes[1]["status"] == "valid" and cells[2] == "valid"  # judged on its second try
        assert probes[1]["reason"] == "measured 2 times, client_bound before (try 1: stamps held by stalls (3.0 % of their spans))"
        assert [p["tries"] for p in probes] == [1, 2, 1, 1]
        assert all(p["reason"] is None for p in probes if p["load"] != 2)
        assert "probe 1 at N = 2 is client_bound: measuring it again (1 of 1)" in said
        assert shown.total == len(measured)  # the display counts the retry as a step of its own
        assert caption.endswith(f"; probe 1: {probes[1]['reason']}")  # the report's probe table says so
    else:
        assert measured == [1, 2] and search["status"] == "stopped" and cells[2] == "client_bound" and shown.total == 2
        assert [p["tries"] for p in probes] == [1, 1]
        assert probes[1]["verdict"] == "stop" and search["reason"].startswith("probe 1 at N = 2 is client_bound: stamps held by stalls")
        assert "measuring it again" not in said and "measured 2 times" not in search["reason"] and "probe 1:" not in caption
