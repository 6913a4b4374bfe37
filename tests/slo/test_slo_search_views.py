"""The SLO search's store on a real DuckDB file: open-loop points judged by ``slo_points`` (checked against a
hand computation from the stored requests), the ``slo_search`` view and the report's section, and the
command's one-line errors for bad input (docs/load.md, "Search")."""

from __future__ import annotations

import io
import json
import math

import pytest
from click.testing import CliRunner
from rich.console import Console

from infermatrix.cli.search_cmd import search
from infermatrix.core.report.json_report import json_of
from infermatrix.core.report.data import load_report
from infermatrix.core.report.text import render_text
from infermatrix.core.slo import parse_slo
from infermatrix.core.store import Store
from infermatrix.core.store.points import save_point
from infermatrix.core.store.slo_search import save_probe, save_search
from infermatrix.core.store.slo_store import save_slos


def point_requests(tpots_ms: list[float], ttft_ms: float = 50.0, tokens: int = 11) -> list[dict]:
    """Requests of a point: each scheduled at i s, first token ``ttft_ms`` later, then ``tokens - 1`` gaps of its TPOT."""
    out = []
    for i, tpot in enumerate(tpots_ms):
        first = i + ttft_ms / 1000
        end = first + (tokens - 1) * tpot / 1000
        out.append({"request_no": i, "scheduled": float(i), "sent": float(i), "first_token": first, "ended": end, "lag_ms": 0.0,
                    "ttft_ms": ttft_ms, "e2e_ms": (end - i) * 1000, "output_tokens": tokens, "outcome": "ok"})  # fmt: skip
    return out


def point_row(point: int, rate: float, status: str = "valid") -> dict:
    return {"point": point, "label": f"poisson@{rate:g}/s", "arrival": "poisson", "requested_rate": rate, "duration_s": 10.0,
            "status": status, "reason": None if status == "valid" else "schedule lag p99 80 ms > bound 25 ms", "ttft_p99_ms": 50.0}  # fmt: skip


def nearest_rank(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[max(1, math.ceil(q * len(s))) - 1]


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "search.duckdb") as s:
        yield s


def test_slo_points_judges_a_point_as_a_hand_computation_from_its_requests(store):
    rid = store.create_run({"engine": "sim", "model": "m"})
    fast = [10.0] * 18 + [30.0, 31.0]  # p90 10 ms, p99 31 ms (nearest rank over 20 requests)
    save_point(store, rid, point_row(0, 2.0), point_requests(fast))
    save_point(store, rid, point_row(1, 4.0, status="client_bound"), point_requests(fast))  # not judged: not valid
    save_slos(store, rid, [parse_slo("tpot_p90_ms=20"), parse_slo("tpot_p99_ms=20"), parse_slo("tpot_ms=20"),
                           parse_slo("tpot_ms=20,attainment=0.9"), parse_slo("ttft_p50_ms=40")])  # fmt: skip
    cols, rows = store.query("SELECT slo, point, meets, attainment, judged_requests, good_requests, tpot_p50_ms, tpot_p99_ms "
                             "FROM slo_points WHERE run_id = ? ORDER BY slo", [rid])  # fmt: skip
    got = {r[0]: dict(zip(cols, r)) for r in rows}
    assert {r["point"] for r in got.values()} == {0}  # the client_bound point is never judged
    assert nearest_rank(fast, 0.90) == 10.0 and nearest_rank(fast, 0.99) == 31.0  # the hand computation
    assert got["tpot_p90_ms=20"]["meets"] is True
    assert got["tpot_p99_ms=20"]["meets"] is False
    assert got["tpot_ms=20"]["meets"] is False  # a limit without a percentile holds for every request, or fails
    assert got["tpot_ms=20,attainment=0.9"]["meets"] is True  # 18 / 20 = 0.9 good
    assert got["tpot_ms=20"]["attainment"] == pytest.approx(18 / 20) and got["tpot_ms=20"]["good_requests"] == 18
    assert got["ttft_p50_ms=40"]["meets"] is False  # TTFT 50 ms, from the scheduled time
    assert got["tpot_p90_ms=20"]["tpot_p50_ms"] == pytest.approx(10.0) and got["tpot_p90_ms=20"]["tpot_p99_ms"] == pytest.approx(31.0)


def _stored_search(store) -> str:
    rid = store.create_run({"engine": "sim", "model": "m"})
    save_slos(store, rid, [parse_slo("tpot_p90_ms=20")])
    save_search(store, rid, {"slo": "tpot_p90_ms=20", "over": "rate", "context_tokens": 1024, "arrival": "poisson", "start": 2.0,
                             "start_source": "stated", "resolution": "10%", "highest_pass": 3.0, "lowest_fail": 3.25,
                             "status": "found"})  # fmt: skip
    for i, (load, verdict) in enumerate([(2.0, "pass"), (4.0, "fail"), (3.0, "pass"), (3.5, "fail"), (3.25, "fail")]):
        save_probe(store, rid, {"probe": i, "step": "start" if i == 0 else "bisect", "load": load, "point": i, "status": "valid",
                                "meets": verdict == "pass", "verdict": verdict, "attainment": 1.0, "achieved": load})  # fmt: skip
    return rid


def test_slo_search_view_and_the_report_section(store):
    rid = _stored_search(store)
    cols, rows = store.query("SELECT * FROM slo_search WHERE run_id = ?", [rid])
    row = dict(zip(cols, rows[0]))
    assert cols[:11] == ["run_id", "slo", "over", "context_label", "highest_pass", "lowest_fail", "interval_width", "resolution",
                         "probes", "status", "reason"]  # fmt: skip
    assert (row["highest_pass"], row["lowest_fail"], row["probes"], row["context_label"]) == (3.0, 3.25, 5, "1K")
    assert row["interval_width"] == pytest.approx(0.25)
    out = io.StringIO()
    render_text(store, rid, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "SLO search" in text and "SLO search probes" in text and "3/s" in text and "3.25/s" in text
    doc = json.loads(json.dumps(json_of(load_report(store, rid)), default=str))
    assert doc["slo"]["search"][0]["highest_pass"] == 3.0 and len(doc["slo"]["search_probes"]) == 5


@pytest.mark.parametrize("args, says", [
    ([], "Missing option '--slo'"),
    (["--slo", "bogus_ms=1", "--base-url", "http://127.0.0.1:9"], "--slo bogus_ms=1: unknown limit"),
    (["--slo", "tpot_p99_ms=50", "--over", "speed", "--base-url", "http://127.0.0.1:9"], "'--over'"),
    (["--slo", "tpot_p99_ms=50", "--resolution", "abc", "--base-url", "http://127.0.0.1:9"], "--resolution abc"),
    (["--slo", "tpot_p99_ms=50", "--over", "concurrency", "--resolution", "0.5", "--base-url", "http://127.0.0.1:9"], "whole requests"),
    (["--slo", "tpot_p99_ms=50", "--start", "0", "--base-url", "http://127.0.0.1:9"], "--start: must be greater than 0"),
    (["--slo", "tpot_p99_ms=50", "--context", "1Q", "--base-url", "http://127.0.0.1:9"], "--context"),
    (["--slo", "tpot_p99_ms=50", "--over", "concurrency", "--arrival", "poisson", "--base-url", "http://127.0.0.1:9"], "only for --over rate"),
    (["--slo", "tpot_p99_ms=50", "--over", "concurrency", "--start", "1.5", "--base-url", "http://127.0.0.1:9"], "whole number"),
    (["--slo", "tpot_p99_ms=50", "--start", "8", "--max", "4", "--base-url", "http://127.0.0.1:9"], "below start"),
    (["--slo", "tpot_p99_ms=50"], "give a CONFIG_FILE"),
])  # fmt: skip
def test_bad_input_is_one_line_exit_2(tmp_path, args, says):
    result = CliRunner().invoke(search, [*args, "--db", str(tmp_path / "x.duckdb")])
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error:") and says in lines[0], result.output
    assert not (tmp_path / "x.duckdb").exists()  # nothing ran, no store made
