"""Issue 27: the client verdict does not cry wolf on short requests.

One stream of 16- and of 32-token requests on the ``tiny`` sim (2 ms steps: spans of ~20 and ~45 ms), 4 s windows.
Before, every such cell came out ``client_bound`` ("stamps held by stalls ... 1.0-1.3 % of their spans", and more on
this shared machine), its rates within 1 % of the server's. Judged by the sim's own record of the cell's window:

* the 32-token cell is ``valid`` where the machine was idle (``bars.QUIET_CORES``: the kernel's count of the cores
  busy outside the test's processes, tests/machine_load.py), and its total and per-request tok/s and TBT are within
  their bars (bars.py; the per-request ones with the last chunk's usual extra delay, ``LAST_CHUNK_LATE_MS``, over the
  server's mean span);
* the 16-token cell states a span share of at most 100 %. It is not held to the 1 % bars: 1 % of its ~20 ms span is
  0.2 ms, and a request's last chunk reaches the client 0.1-0.3 ms later after the step-end time the sim's record
  gives than its other chunks do (median last-chunk delay 0.39 ms against 0.11 ms at 32 tokens,
  scripts/calibrate_verdict.py): ~1 % at 16 tokens that no client could see or correct (docs/performance.md, "Client
  verdict calibration"). Not the sim's end-of-request bookkeeping before its write, as first thought: a record of the
  sim's own writes, tried on 2026-12-07, moved the 32-token server rate by 0.03-0.09 % only (docs/performance.md,
  ninth session); the same delay is ``LAST_CHUNK_LATE_MS`` in the 32-token cell's bars.

per_request_tps is compared with the server's emissions under the client's own definition (docs/metrics.md): the
request's first arrival is its first in-window chunk and those within ARRIVAL_GROUP_S of it. The sim, behind its
step clock on a loaded machine, emits catch-up bursts 0.1 ms apart; the client groups them as its definition says.
"""

from __future__ import annotations

import json

import duckdb
import httpx
import pytest
import bars
from imxtest import SimServer, run_cli
from machine_load import ForeignLoad
from profiles import write_profile
from truthlib import rel_err

from infermatrix.core.measure.metrics import ARRIVAL_GROUP_S

pytestmark = [pytest.mark.slow, pytest.mark.solo]  # solo: the claim is "never client_bound at idle" on a 1-stream cell (tests/solo.py)

WINDOW_S = 4


def _server_rate(truth: dict, prefix: str, start: float, end: float) -> tuple[float, float]:
    """The server's per-request tok/s over [start, end] by docs/metrics.md's definition, from its step record, and the
    mean span (s) of the requests it counts."""
    tokens, span, spans = 0, 0.0, 0
    for req in truth["requests"]:
        if not (req.get("request_id") or "").startswith(prefix):
            continue
        inside = [(t, int(n)) for t, n in req["emissions"] if start <= t <= end]
        first = 0
        while first + 1 < len(inside) and inside[first + 1][0] - inside[0][0] <= ARRIVAL_GROUP_S:
            first += 1
        if len(inside) - first >= 2 and inside[-1][0] > inside[first][0]:
            tokens += sum(n for _, n in inside[first + 1 :])
            span += inside[-1][0] - inside[first][0]
            spans += 1
    return tokens / span, span / spans


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("short")
    server = SimServer(str(write_profile(tmp / "p.toml")), tmp / "sim.log")
    try:
        yield server, tmp
    finally:
        server.stop()


@pytest.mark.parametrize("out", [32, 16])
def test_one_stream_of_short_requests(sim, out):
    server, tmp = sim
    db = tmp / f"s{out}.duckdb"
    with ForeignLoad(server.proc.pid) as load:  # was the machine idle, as the claim below supposes? (the kernel's count)
        proc = run_cli("run", "--engine", "sim", "--base-url", server.base_url, "--contexts", "1K", "--concurrency", "1",
                       "--duration", str(WINDOW_S), "--max-output", str(out), "--db", str(db))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    with duckdb.connect(str(db), read_only=True) as con:
        run_id, status, reason, total, per_req, tbt, ws, we, flags = con.execute(
            "SELECT run_id, status, reason, total_tps, per_request_tps, tbt_ms, window_start, window_end, flags FROM cells"
        ).fetchone()
    client = json.loads(flags)["client"]
    w = httpx.get(f"{server.base_url}/debug/window", params={"start": ws, "end": we}, timeout=60).json()
    rate, mean_span_s = _server_rate(server.truth(), f"{run_id}-decode-", ws, we)
    seen = (out, status, reason, client["span_lag_share"], client["window"], f"total {total} / {w['total_tps']}",
            f"per-request {per_req} / {rate}", f"tbt {tbt} / {1000 / rate}", f"cores busy outside the test {load.cores}")  # fmt: skip
    print(seen)
    assert client["span_lag_share"] is not None and 0 <= client["span_lag_share"] <= 1, seen
    assert status in ("valid", "client_bound"), seen
    if out == 16:
        return
    if load.cores is not None and load.cores <= bars.QUIET_CORES:
        assert status == "valid", seen  # before issue 27: client_bound on every idle run here
    assert bars.judged(status, rel_err(total, w["total_tps"]) <= bars.TOTAL_TPS), seen
    late = bars.LAST_CHUNK_LATE_MS / (mean_span_s * 1000)  # the last chunk's usual extra delay, of the server's spans
    assert bars.judged(status, rel_err(per_req, rate) <= bars.PER_REQUEST_TPS + late), (seen, late)
    assert bars.judged(status, rel_err(tbt, 1000 / rate) <= bars.TBT + late), (seen, late)
