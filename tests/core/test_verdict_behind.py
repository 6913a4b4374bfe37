"""Issue 17: a client behind is client_bound — the verdict rule on constructed inputs (measure/selfcheck.py,
measure/batch.py; docs/metrics.md, "Client verdict"). The engine's running count beside the client's in-flight
count (window_batch), and each sign of a client behind: ends read late, restarts sent late, stamps late."""

import pytest

from infermatrix.core.engine.traits import Gauges
from infermatrix.core.measure.batch import WindowBatch, window_batch
from infermatrix.core.measure.inflight import ClientCounts
from infermatrix.core.measure.selfcheck import client_verdict
from infermatrix.core.stream.loop_lag import ClientLoad
from infermatrix.core.measure.steady import GaugeSample
from infermatrix.core.types import RequestRecord

# Bars (to be folded into tests/fidelity/bars.py), from docs/metrics.md "Client verdict":
BEHIND_SHARE = 0.01  # stamps late by more than 1 % of the window (or of the median span): client_bound
GAP_SHARE = 0.02  # the engine held, or the client kept, fewer than N by more than 2 % of N (at least one request)

QUIET = ClientLoad(lag_p50_ms=0.1, lag_p99_ms=0.5, lag_max_ms=1.0, cpu_pct=20.0, samples=800)


def _streams(n: int, start: float = 0.0, end: float = 6.0, every: float = 0.01) -> list[RequestRecord]:
    """n streams reading one token every ``every`` s through the window, each one request long."""
    out = []
    for i in range(n):
        r = RequestRecord(stream_index=i, seq=0, sent=start - 1.0, first_token=start - 0.9, written=True)
        r.events = [(start - 0.9 + every * k, 1) for k in range(int((end - start + 1.4) / every))]
        out.append(r)
    return out


def _engine(n_running: float, rate: float, t0: float = 0.0, t1: float = 6.0) -> list[GaugeSample]:
    return [GaugeSample(t=t, took_s=0.002, gauges=Gauges(running=n_running, waiting=0, generated_tokens=1e6 + rate * (t - t0)))
            for t in [t0 + k for k in range(int(t1 - t0) + 1)]]  # fmt: skip


def _verdict(n, records, batch=None, client_active=None, load=QUIET, engine=None):
    return client_verdict(n, records, (0.0, 6.0), window_load=load, ramp_load=QUIET, engine=engine if engine is not None else [],
                          ttft_ms=50.0, tbt_ms=10.0, ticks=[], batch=batch, client_active=client_active)  # fmt: skip


def test_issue_17_case_256_in_flight_while_the_engine_ran_a_few_is_client_bound():
    """256 counted in flight (all with a first token), the engine running ~130 on average: the client read the ends
    of ~126 finished requests late. Not valid, whatever its token count says."""
    n = 256
    recs = _streams(n)
    b = WindowBatch(reads=7, engine_running_mean=130.0, engine_waiting_mean=0.0, client_in_flight_mean=255.95, client_awaiting_first_mean=0.0)
    v = _verdict(n, recs, batch=b, client_active=255.95, engine=_engine(130.0, n * 100.0))
    assert v.bound and any("read their ends" in w and "125.9 requests late" in w for w in v.why), v.why
    assert {"total_tps", "per_request_tps", "tbt_ms"} <= set(v.doubtful)  # the rates carry the reason (client_bound)


def test_a_gap_within_the_share_or_under_one_request_is_not_a_client_behind():
    n = 128
    recs = _streams(n)
    near = WindowBatch(reads=5, engine_running_mean=n - GAP_SHARE * n + 0.2, engine_waiting_mean=0.0, client_in_flight_mean=n,
                       client_awaiting_first_mean=0.0)  # fmt: skip
    v = _verdict(n, recs, batch=near, client_active=n - 0.5, engine=_engine(near.engine_running_mean, n * 100.0))
    assert not v.bound, v.why
    small = WindowBatch(reads=5, engine_running_mean=7.2, engine_waiting_mean=0.0, client_in_flight_mean=8.0, client_awaiting_first_mean=0.0)
    assert not _verdict(8, _streams(8), batch=small, client_active=7.5, engine=_engine(7.2, 800.0)).bound  # 0.8 of a request: noise of a few reads
    over = WindowBatch(reads=5, engine_running_mean=n - GAP_SHARE * n - 0.5, engine_waiting_mean=0.0, client_in_flight_mean=n,
                       client_awaiting_first_mean=0.0)  # fmt: skip
    assert _verdict(n, recs, batch=over, client_active=n, engine=_engine(over.engine_running_mean, n * 100.0)).bound


def test_requests_awaiting_a_first_token_or_queued_are_not_counted_against_the_client():
    """A request still without a first token may sit in the server's intake (no gauge counts it); one the engine
    queued is in its waiting gauge. Neither is an end the client failed to read."""
    n = 128
    intake = WindowBatch(reads=5, engine_running_mean=100.0, engine_waiting_mean=0.0, client_in_flight_mean=128.0, client_awaiting_first_mean=28.0)
    assert intake.behind == 0.0 and not _verdict(n, _streams(n), batch=intake, client_active=128.0).bound
    queued = WindowBatch(reads=5, engine_running_mean=100.0, engine_waiting_mean=28.0, client_in_flight_mean=128.0, client_awaiting_first_mean=28.0)
    assert queued.behind == 0.0 and queued.held_mean == 128.0


def test_restarts_sent_late_are_client_bound():
    n = 64
    v = _verdict(n, _streams(n), client_active=n * (1 - GAP_SHARE) - 1.0)
    assert v.bound and any("sent restarts late" in w for w in v.why), v.why
    assert not _verdict(n, _streams(n), client_active=n - 1.0).bound  # one request short: within the share and the floor


def test_stamps_late_beyond_the_share_of_the_window_are_client_bound_and_within_it_only_latency_is_marked():
    n = 4
    recs = _streams(n)
    late = ClientLoad(lag_p50_ms=1.0, lag_p99_ms=1000 * BEHIND_SHARE * 6.0 / 2 + 5, lag_max_ms=100.0, cpu_pct=99.0, samples=600)
    v = _verdict(n, recs, load=late, engine=_engine(n, n * 100.0))
    assert v.bound and "of the window" in v.why[0]
    ok = ClientLoad(lag_p50_ms=1.0, lag_p99_ms=1000 * BEHIND_SHARE * 6.0 / 2 * 0.8, lag_max_ms=30.0, cpu_pct=99.0, samples=600)
    w = _verdict(n, recs, load=ok, engine=_engine(n, n * 100.0))
    assert not w.bound and not {"total_tps", "per_request_tps", "tbt_ms"} & set(w.doubtful) and "itl" in w.doubtful


def test_window_batch_pairs_each_read_with_the_clients_count():
    # Two streams in flight the whole window; a third whose end the client read at 3.5 s although the engine
    # finished it at 2.5 (the engine's reads at 3 s see 2 running, the client counts 3).
    recs = [RequestRecord(stream_index=i, seq=0, sent=-1.0, first_token=-0.9, ended=None, written=True) for i in range(2)]
    recs.append(RequestRecord(stream_index=2, seq=0, sent=-1.0, first_token=-0.9, ended=3.5, written=True))
    reads = [GaugeSample(t=t, took_s=0.01, gauges=Gauges(running=r, waiting=0)) for t, r in ((0.01, 3), (1.0, 3), (2.0, 3), (3.0, 2), (4.0, 2))]
    reads.append(GaugeSample(t=4.1, took_s=0.01, gauges=Gauges(running=2, waiting=0)))  # the end edge's read (window 0-4)
    reads.append(GaugeSample(t=9.0, took_s=0.01, gauges=Gauges(running=0, waiting=0)))  # long after: not the window's
    b = window_batch(reads, ClientCounts(recs), 0.0, 4.0)
    assert b is not None and b.reads == 6
    assert b.engine_running_mean == pytest.approx(15 / 6) and b.client_in_flight_mean == pytest.approx(16 / 6)
    assert b.behind == pytest.approx(1 / 6) and b.differ  # 2.50 vs 2.67: > 2 % apart, shown in the report
    assert window_batch([], ClientCounts(recs), 0.0, 4.0) is None


def test_a_client_behind_takes_an_engine_shortfall_with_nothing_queued_but_never_a_preemption():
    from infermatrix.core.measure.selfcheck import ClientVerdict, settle_status

    behind = ClientVerdict(bound=True, why=["the client still counted 128.0 requests … 13.0 requests late"])
    ran_less = {"checked": True, "limited": True, "preemptions": 0, "waiting_share": 0.0}
    assert settle_status("valid", None, behind, ran_less)[0] == "client_bound"
    status, reason = settle_status("admission_limited", "the engine ran at most 127 of 128 at once", behind, ran_less)
    assert status == "client_bound" and "13.0 requests late" in reason and "at most 127 of 128" in reason
    assert settle_status("admission_limited", "preempted", behind, {**ran_less, "preemptions": 3})[0] == "admission_limited"
    assert settle_status("admission_limited", "queued", behind, {**ran_less, "waiting_share": 0.8})[0] == "admission_limited"
    assert settle_status("admission_limited", "x", ClientVerdict(bound=False), ran_less) == ("admission_limited", "x")
    assert settle_status("looped", "y", behind, ran_less) == ("looped", "y")


def test_a_ramp_that_lagged_marks_ttft_but_does_not_bind_the_window_rates():
    """The first N requests are stamped in the ramp: its lag bounds TTFT; the rates are stamped in the window only."""
    n = 4
    ramp = ClientLoad(lag_p50_ms=5.0, lag_p99_ms=200.0, lag_max_ms=400.0, cpu_pct=99.0, samples=100)  # 400 ms: 6.7 % of 6 s
    v = client_verdict(n, _streams(n), (0.0, 6.0), window_load=QUIET, ramp_load=ramp, engine=_engine(n, n * 100.0),
                       ttft_ms=200.0, tbt_ms=10.0, ticks=[(3.0, 0.001)])  # fmt: skip
    assert not v.bound, v.why
    assert "ttft_ms" in v.doubtful and v.detail["stamp_lag_bound_ms"] == 400.0 and v.detail["window_lag_bound_ms"] == 1.0
