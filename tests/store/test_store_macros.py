"""The store's statistics macros (views.sql) against their Python twins on the same inputs, in a real DuckDB
store: nearest_rank() == infermatrix.core.quantiles.nearest_rank (which the load client's lag, TTFT and e2e
quantiles call), wilson_bound() == the Wilson score formula written out here (docs/metrics.md), and a percentile
limit judged at the rank the documented rule names even where float arithmetic would move it (p99.9 of 1000)."""

from __future__ import annotations

import math
import random

import pytest

from infermatrix.core.quantiles import nearest_rank, percentile
from infermatrix.core.slo import parse_slo
from infermatrix.core.store import Store
from infermatrix.core.store.points import save_point
from infermatrix.core.store.slo_store import save_slos

QS = (0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0)
PERCENTS = (50, 90, 95, 99, 99.5, 99.9, 99.99)  # as an SLO limit states them: the views pass P / 100.0


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "macros.duckdb") as s:
        yield s


def _sql_rank(store, xs: list[float], q: float) -> float | None:
    return store.query("SELECT nearest_rank(list_sort(?::DOUBLE[]), ?)", [xs, q])[1][0][0]


def test_python_nearest_rank_equals_the_sql_macro_on_random_samples(store):
    rng = random.Random(28)
    cases = 0
    for n in [*range(1, 40), 100, 200, 999, 1000, 1001, 2000, *(rng.randint(1, 5000) for _ in range(40))]:
        xs = [round(rng.lognormvariate(3, 1), 3) for _ in range(n)]
        qs = [*QS, *(p / 100.0 for p in PERCENTS), rng.random()]
        got = store.query("SELECT list_transform(?::DOUBLE[], lambda q: nearest_rank(list_sort(?::DOUBLE[]), q))", [qs, xs])[1][0][0]
        assert got == [nearest_rank(sorted(xs), q) for q in qs] == [percentile(xs, q) for q in qs], (n, qs)
        cases += len(qs)
    assert cases > 1000
    assert _sql_rank(store, [], 0.5) is None and nearest_rank([], 0.5) is None  # no values: no percentile


@pytest.mark.parametrize(("n", "p", "rank"), [(1000, 99.9, 999), (2000, 99.9, 1998), (100, 99, 99), (20, 90, 18), (1, 99, 1)])
def test_nearest_rank_is_the_documented_rank_where_float_error_would_move_it(store, n, p, rank):
    """99.9 / 100.0 × 1000 is 999.0000000000001 in binary: without rounding its ceiling takes rank 1000 (the max)."""
    xs = [float(i) for i in range(1, n + 1)]
    assert _sql_rank(store, xs, p / 100.0) == rank == nearest_rank(xs, p / 100.0)


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The 95 % Wilson score interval, written out from its formula (docs/metrics.md)."""
    p = k / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - half) / (1 + z * z / n)), min(1.0, (centre + half) / (1 + z * z / n))


@pytest.mark.parametrize(("k", "n"), [(0, 1), (1, 1), (0, 12), (12, 12), (9, 10), (18, 20), (1, 3), (731, 1000)])
def test_wilson_bound_is_the_wilson_score_interval(store, k, n):
    lo, hi = store.query("SELECT wilson_bound(?::BIGINT, ?::BIGINT, -1), wilson_bound(?::BIGINT, ?::BIGINT, 1)", [k, n, k, n])[1][0]
    assert (lo, hi) == pytest.approx(wilson(k, n), abs=1e-12)
    assert 0.0 <= lo <= k / n <= hi <= 1.0
    assert store.query("SELECT wilson_bound(NULL::BIGINT, NULL::BIGINT, 1), wilson_bound(0::BIGINT, 0::BIGINT, -1)")[1] == [(None, None)]


def test_a_p99_9_limit_over_1000_requests_is_judged_at_rank_999(store):
    """The 999th of 1000 TPOTs meets the limit and the slowest does not: tpot_p99.9_ms=20 is met (rank ⌈0.999 × 1000⌉)."""
    rid = store.create_run({"engine": "sim", "model": "m"})
    tpots = [10.0] * 999 + [40.0]
    requests = []
    for i, tpot in enumerate(tpots):
        first, end = i + 0.05, i + 0.05 + 10 * tpot / 1000
        requests.append({"request_no": i, "scheduled": float(i), "sent": float(i), "first_token": first, "ended": end, "lag_ms": 0.0,
                         "ttft_ms": 50.0, "e2e_ms": (end - i) * 1000, "output_tokens": 11, "outcome": "ok"})  # fmt: skip
    save_point(store, rid, {"point": 0, "label": "poisson@1/s", "arrival": "poisson", "requested_rate": 1.0, "duration_s": 1000.0,
                            "status": "valid", "ttft_p99_ms": 50.0}, requests)  # fmt: skip
    save_slos(store, rid, [parse_slo("tpot_p99.9_ms=20"), parse_slo("tpot_p100_ms=20")])
    got = dict(store.query("SELECT slo, meets FROM slo_points WHERE run_id = ?", [rid])[1])
    assert got == {"tpot_p99.9_ms=20": True, "tpot_p100_ms=20": False}
