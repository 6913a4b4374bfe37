"""scripts/bench_client.py still runs end to end (its figures are speed, checked by nobody; its code is)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.slow
def test_bench_client_smoke(tmp_path):
    out = tmp_path / "b.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_client.py"), "--streams", "2", "--seconds", "0.3", "--json", str(out)],
                          capture_output=True, text=True, timeout=240)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = json.loads(out.read_text())
    flood = figures["readers"]["flood"]["2"]
    assert set(flood) == {"httpx", "raw", "bare"} and all(v > 0 for v in flood.values())
    paced = figures["readers"]["paced"]["2"]
    # lags are client stamp minus server stamp on one host's monotonic clock: never negative
    assert all(p50 >= 0 for p50, _ in (paced[r] for r in ("httpx", "raw", "bare")))
    assert figures["workers_raw"]["1"] > 0
