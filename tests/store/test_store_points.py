"""Open-loop points in the store: one transaction per point, resume's view of them, the load_points view."""

import pytest

from infermatrix.core.store import Store, StoreError
from infermatrix.core.store.points import done_points, has_points, save_point


def _point(i, status="valid", **kw):
    return {"point": i, "label": f"poisson@{i + 1}/s 1K", "arrival": "poisson", "requested_rate": float(i + 1), "duration_s": 10.0,
            "scheduled": 10, "scheduled_rate": 1.0, "sent": 10, "achieved_rate": 0.99, "lag_p50_ms": 1.0, "lag_p99_ms": 3.0,
            "ks_p": 0.5, "status": status, "completed": 10, "ttft_p50_ms": 20.0, **kw}  # fmt: skip


def _requests(n, **kw):
    return [{"request_no": i, "request_id": f"r{i}", "scheduled": 1.0 + i, "sent": 1.001 + i, "lag_ms": 1.0, "outcome": "ok", **kw}
            for i in range(n)]  # fmt: skip


def test_a_point_is_saved_whole_replaced_on_resave_and_shown_in_the_view(store):
    run = store.create_run({"engine": "sim"})
    save_point(store, run, _point(0, "interrupted"), _requests(3))
    save_point(store, run, _point(1, "client_bound", reason="schedule lag p99 40.0 ms > bound 25.0 ms"), _requests(2))
    assert done_points(store, run) == {1}  # an interrupted point runs again
    save_point(store, run, _point(0, "error", reason="engine down"), _requests(4))
    assert done_points(store, run) == {0, 1} and done_points(store, run, retry_errors=True) == {1}
    _, n = store.query("SELECT count(*) FROM point_requests WHERE run_id = ? AND point = 0", [run])
    assert n[0][0] == 4  # the earlier version's requests are gone
    cols, rows = store.query("SELECT * FROM load_points WHERE run_id = ?", [run])
    assert cols[:15] == ["run_id", "point", "arrival", "requested_rate", "achieved_rate", "lag_p50_ms", "lag_p99_ms", "ks_p",
                         "status", "reason", "ttft_p50_ms", "ttft_p99_ms", "e2e_p50_ms", "output_tps", "completed"]  # fmt: skip
    assert [(r[1], r[8]) for r in rows] == [(0, "error"), (1, "client_bound")]
    store.delete_run(run)
    assert store.query("SELECT count(*) FROM point_requests")[1][0][0] == 0
    assert has_points(store)


def test_a_bad_point_saves_nothing(store):
    run = store.create_run({"engine": "sim"})
    with pytest.raises(StoreError, match="unknown status 'fine'"):
        save_point(store, run, _point(0, "fine"), _requests(1))
    with pytest.raises(StoreError, match="could not save load point 0"):
        save_point(store, run, _point(0), _requests(1, request_no="not a number"))
    assert store.query("SELECT count(*) FROM points")[1][0][0] == 0


def test_a_store_reopened_read_only_keeps_its_points(db_path):
    with Store(db_path) as s:
        run = s.create_run({"engine": "sim"})
        save_point(s, run, _point(0), _requests(1))
    with Store(db_path, read_only=True) as s:
        assert s.query("SELECT status FROM load_points")[1] == [("valid",)]
