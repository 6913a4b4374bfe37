"""The sweep views (issue 29 item 4; sweeps.sql, docs/tuning.md) over a real DuckDB file of made-up runs: the
setting string, the frontier across every setting of a sweep, the best setting per SLO and context with its
runner-up and the noise rule, an SLO added later deciding again with nothing rerun, unknown GPU counts said, and a
v10 store gaining the sweep tables on a read-only open."""

from __future__ import annotations

import duckdb
from imx_factories import RUN_INFO

from infermatrix.core.intervals import Interval
from infermatrix.core.measure.histograms import histogram_of
from infermatrix.core.types import CellResult, RequestRecord

from infermatrix.core.slo import parse_slo
from infermatrix.core.store import Store
from infermatrix.core.store.connect import SCHEMA_VERSION
from infermatrix.core.store.slo_store import save_slos
from infermatrix.core.store.sweep_store import SweepMember, resolve_sweep, save_sweep, sweep_members

K = 1024
LOOSE = "ttft_p99_ms=100000"


W0, W1 = 100.0, 110.0  # every cell's window (monotonic seconds)


def _cell(n: int, scale: float, width: float | None) -> CellResult:
    """n streams, each with 3 requests of 100 x scale tokens inside the window (goodput in proportion to scale); TTFT
    60 ms x n ÷ scale (load makes it grow), a token every 10 ms ÷ scale; total tok/s with a ±``width`` interval."""
    gap, ttft, tokens = 0.010 / scale, 0.060 * n / scale, round(100 * scale)
    requests = []
    for stream in range(n):
        for seq in range(3):
            r = RequestRecord(stream_index=stream, seq=seq, sent=W0 + 0.5 + 3 * seq + 0.01 * stream, outcome="ok", finish_reason="length")
            r.first_token = r.sent + ttft
            r.events = [(r.first_token + i * gap, 1) for i in range(tokens)]
            r.ended = r.events[-1][0]
            requests.append(r)
    total = n * 100 * scale / (1 + 0.05 * n)  # more streams: more in total, less each
    c = CellResult(context_tokens=8 * K, concurrency=n, status="valid", total_tps=total, per_request_tps=total / n,
                   ttft_ms=ttft * 1000, tbt_ms=gap * 1000, avg_active=n, completed=len(requests), output_tokens=tokens * len(requests),
                   measured_s=W1 - W0, window_start=W0, window_end=W1, requests=requests)  # fmt: skip
    c.histograms = {"ttft": histogram_of([ttft] * len(requests)), "tbt": histogram_of([gap] * len(requests))}
    if width is not None:
        c.intervals = {"total_tps": Interval(total, total * (1 - width), total * (1 + width), "test", 20)}
    return c


def _run(store: Store, scale: float, width: float | None, concurrency=(1, 2, 8), gpus: int | None = 4) -> str:
    """A completed run of 8K cells at ``scale`` x the base speed, each total tok/s with a ±``width`` interval."""
    hardware = {"gpu": "H200 SXM", "gpu_count": gpus} if gpus else {}
    run_id = store.create_run(dict(RUN_INFO, hardware=hardware, launch_command="x"))
    for n in concurrency:
        store.save_cell(run_id, _cell(n, scale, width))
    store.finish_run(run_id, "completed")
    return run_id


def _sweep(store: Store, runs: dict[str, str], sweep_id: str = "s1234567", slo: str = LOOSE) -> str:
    members = [SweepMember(k, rid, "c.toml", {}, {"engine.args.max_num_seqs": value}) for k, (value, rid) in enumerate(runs.items(), 1)]
    save_sweep(store, sweep_id, "seqs", {"grid": ["engine.args.max_num_seqs=…"]}, members)
    for rid in runs.values():
        save_slos(store, rid, [parse_slo(slo)])
    return sweep_id


def _dicts(store: Store, sql: str, *params) -> list[dict]:
    cols, rows = store.query(sql, list(params))
    return [dict(zip(cols, r)) for r in rows]


def test_sweep_runs_lists_every_combination_with_its_setting(store):
    a = _run(store, 1.0, 0.01)
    members = [SweepMember(1, a, "c.toml", {}, {"engine.args.max_num_seqs": "16"}),
               SweepMember(2, "deadbeef", "c.toml", {}, {"engine.args.max_num_seqs": "64"})]  # the second never started
    sid = "s1234567"
    save_sweep(store, sid, "seqs", {}, members)
    rows = _dicts(store, "SELECT * FROM sweep_runs WHERE sweep_id = ?", sid)
    assert [(r["setting"], r["status"], r["k"]) for r in rows] == [
        ("engine.args.max_num_seqs=16", "completed", 1), ("engine.args.max_num_seqs=64", "not started", 2)]
    assert resolve_sweep(store, "s12") == (sid, "seqs") and resolve_sweep(store, "zz") is None
    assert [m.setting for m in sweep_members(store, sid)] == [{"engine.args.max_num_seqs": "16"}, {"engine.args.max_num_seqs": "64"}]


def test_the_sweep_frontier_marks_exactly_the_undominated_cells_across_settings(store):
    runs = {"2": _run(store, 1.0, 0.01), "16": _run(store, 1.3, 0.01, concurrency=(1, 8)), "64": _run(store, 0.7, 0.01)}
    sid = _sweep(store, runs)
    pts = _dicts(store, "SELECT * FROM sweep_frontier WHERE sweep_id = ?", sid)
    assert len(pts) == 8 and {p["setting"] for p in pts} == {f"engine.args.max_num_seqs={v}" for v in runs}
    for p in pts:
        dominated = any(q["tps_per_gpu"] >= p["tps_per_gpu"] and q["tps_per_user"] >= p["tps_per_user"]
                        and (q["tps_per_gpu"] > p["tps_per_gpu"] or q["tps_per_user"] > p["tps_per_user"]) for q in pts)  # fmt: skip
        assert p["on_frontier"] is (not dominated), p
    # the per-run frontier marks the slower runs' own cells; across the sweep the faster setting dominates them
    assert not any(p["on_frontier"] for p in pts if p["setting"].endswith("=64"))
    assert any(p["on_frontier"] for p in pts if p["setting"].endswith("=16"))


def _best(store: Store, sid: str, objective: str = "goodput", slo: str = LOOSE) -> dict:
    rows = _dicts(store, "SELECT * FROM best_setting WHERE sweep_id = ? AND objective = ? AND slo = ?", sid, objective, slo)
    assert len(rows) == 1, rows  # one context
    return rows[0]


def test_best_setting_is_the_most_goodput_per_gpu_with_its_runner_up(store):
    runs = {"2": _run(store, 1.0, 0.01), "16": _run(store, 1.5, 0.01), "64": _run(store, 1.2, 0.01)}
    sid = _sweep(store, runs)
    # what the definition says, read off slo_cells: the most token goodput per GPU over the cells that meet the SLO
    want = {}
    for value, rid in runs.items():
        _, got = store.query("SELECT max(token_goodput) FROM slo_cells WHERE run_id = ? AND slo = ? AND meets", [rid, LOOSE])
        want[value] = got[0][0] / 4
    best = _best(store, sid)
    ranked = sorted(want, key=want.get, reverse=True)
    assert best["setting"] == f"engine.args.max_num_seqs={ranked[0]}" and abs(best["value"] - want[ranked[0]]) < 1e-9
    assert best["runner_up_setting"] == f"engine.args.max_num_seqs={ranked[1]}"
    assert abs(best["margin"] - (want[ranked[0]] / want[ranked[1]] - 1)) < 1e-9
    assert best["beyond_noise"] is True and best["noise_method"] == "intervals" and best["gpus_note"] is None
    capacity = _best(store, sid, "capacity")
    assert capacity["value"] == 8 and capacity["beyond_noise"] is False  # every setting met the SLO at 8: a tie of the load grid


def test_a_margin_inside_the_intervals_is_not_beyond_noise_and_without_intervals_the_fixed_rule_decides(store):
    narrow = _sweep(store, {"2": _run(store, 1.0, 0.01), "16": _run(store, 1.03, 0.01)}, "s0000001")
    wide = _sweep(store, {"2": _run(store, 1.0, 0.10), "16": _run(store, 1.03, 0.10)}, "s0000002")
    bare = _sweep(store, {"2": _run(store, 1.0, None), "16": _run(store, 1.01, None)}, "s0000003")
    n, w, b = _best(store, narrow), _best(store, wide), _best(store, bare)
    assert n["setting"] == w["setting"] == "engine.args.max_num_seqs=16"
    # ln(1.03) = 0.030 against 1.96 x √2 x se: se = ln(1.01/0.99)/3.92 = 0.0051 (threshold 0.014), se = 0.051 (0.141)
    assert n["beyond_noise"] is True and w["beyond_noise"] is False and n["noise_method"] == w["noise_method"] == "intervals"
    assert b["noise_method"] == "fixed 2 % rule" and b["beyond_noise"] is (b["margin"] > 0.02)


def test_an_slo_stored_later_decides_again_without_rerunning(store):
    slow, fast = _run(store, 1.0, 0.01), _run(store, 2.0, 0.01)  # the fast one's TTFT is half the slow one's
    sid = _sweep(store, {"2": slow, "16": fast})
    before = _dicts(store, "SELECT slo FROM best_setting WHERE sweep_id = ?", sid)
    assert {r["slo"] for r in before} == {LOOSE}
    tight = "ttft_p99_ms=250"  # TTFT 60 ms x n ÷ scale: the slow setting meets it up to 4 streams (2 here), the fast one at 8
    for rid in (slow, fast):
        save_slos(store, rid, [parse_slo(tight)])
    capacity = _best(store, sid, "capacity", tight)
    assert capacity["setting"] == "engine.args.max_num_seqs=16" and capacity["value"] == 8
    assert capacity["runner_up_value"] < 8 and capacity["beyond_noise"] is True and capacity["noise_method"] == "load grid"


def test_an_unknown_gpu_count_is_said_with_how_to_give_it(store):
    sid = _sweep(store, {"2": _run(store, 1.0, 0.01, gpus=None), "16": _run(store, 1.5, 0.01, gpus=None)})
    front = _dicts(store, "SELECT tps_per_gpu, on_frontier, gpus_note FROM sweep_frontier WHERE sweep_id = ?", sid)
    assert all(p["tps_per_gpu"] is None and p["on_frontier"] is None for p in front)
    assert all("--set hardware.gpus=N" in p["gpus_note"] for p in front)
    best = _best(store, sid)
    assert best["setting"] == "engine.args.max_num_seqs=16" and "per server, not per GPU" in best["gpus_note"]


def test_a_v10_store_gains_the_sweep_tables_and_views_on_a_read_only_open(tmp_path):
    path = tmp_path / "v10.duckdb"
    with Store(path) as s:
        _run(s, 1.0, 0.01)
    con = duckdb.connect(str(path))
    for view in ("best_setting", "sweep_setting_scores", "sweep_frontier", "sweep_runs"):
        con.execute(f"DROP VIEW {view}")
    for table in ("run_settings", "sweep_members", "sweeps"):
        con.execute(f"DROP TABLE {table}")
    con.execute("DELETE FROM schema_version")
    con.execute("INSERT INTO schema_version VALUES (10, now()::TIMESTAMP)")
    con.close()
    with Store(path, read_only=True) as s:
        assert s.query("SELECT max(version) FROM schema_version")[1] == [(SCHEMA_VERSION,)]
        assert s.query("SELECT count(*) FROM best_setting")[1] == [(0,)]
        assert s.query("SELECT count(*) FROM run_settings")[1] == [(0,)]


def test_a_report_says_where_the_gpu_count_is_missing_and_how_to_give_it(store):
    from infermatrix.core.report import render_markdown

    unknown, known = _run(store, 1.0, 0.01, gpus=None), _run(store, 1.0, 0.01)
    for rid in (unknown, known):
        save_slos(store, rid, [parse_slo(LOOSE)])
    page = render_markdown(store, unknown)
    assert "GPU count unknown: give it with --set hardware.gpus=N" in page
    assert "GPU count unknown" not in render_markdown(store, known)
