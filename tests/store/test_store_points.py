"""Open-loop points in the store: one transaction per point, resume's view of them, the load_points view."""

import pytest

from infermatrix.core.store import Store, StoreError
from infermatrix.core.store.points import done_points, save_point


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


def test_a_trace_point_saves_its_trace_rows_with_it_and_the_arrivals_view_counts_per_second(store):
    """A trace point's trace_points / trace_requests rows go in its transaction, are replaced on re-save, leave
    with the run, and trace_arrivals counts due and sent requests per second since the point's origin."""
    run = store.create_run({"engine": "sim"})
    trace = {"path": "/t/m.jsonl", "format": "mooncake", "sha256": "ab", "time_scale": 1.0, "in_file": 5, "replayed": 4,
             "skipped_failed": 1, "shared_prefix_tokens": 512}  # fmt: skip
    # Due at 0.2, 0.9, 1.5, 3.1 s after the origin (100.0); the second one sent late, in second 1.
    due = [0.2, 0.9, 1.5, 3.1]
    reqs = [{"request_no": i, "request_id": f"r{i}", "scheduled": 100 + d, "sent": 100 + d + (0.2 if i == 1 else 0.001),
             "outcome": "ok", "trace_index": i + 1, "shared_prefix_tokens": 512 * (i == 2)} for i, d in enumerate(due)]  # fmt: skip
    point = _point(0, arrival="trace", origin=100.0, trace=trace)
    save_point(store, run, point, reqs)
    _, got = store.query("SELECT replayed, skipped_failed, shared_prefix_tokens FROM trace_points WHERE run_id = ?", [run])
    assert got == [(4, 1, 512)]
    _, arr = store.query("SELECT second, requested, sent FROM trace_arrivals WHERE run_id = ? ORDER BY second", [run])
    assert arr == [(0, 2, 1), (1, 1, 2), (3, 1, 1)]
    save_point(store, run, point, reqs[:2])
    assert store.query("SELECT count(*) FROM trace_requests WHERE run_id = ?", [run])[1][0][0] == 2
    save_point(store, run, _point(0), _requests(2))  # re-run as a rate point: no trace rows left behind
    assert store.query("SELECT count(*) FROM trace_points")[1][0][0] == 0 == store.query("SELECT count(*) FROM trace_requests")[1][0][0]
    save_point(store, run, point, reqs)
    store.delete_run(run)
    assert store.query("SELECT count(*) FROM trace_requests")[1][0][0] == 0
