"""Offset conversion, the skew knob, the exact merge of hosts' histograms and the per-host verdict: pure, no Ray."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from raykit import require_ray

from infermatrix.core.measure import histograms
from infermatrix.core.distributed.clocks import Exchange, estimate_offset, fit_clock
from infermatrix.core.distributed.hostclock import ClockSkew, convert_record, drift_uncertainty_ppm, skews_from_env, window_bound
from infermatrix.core.measure.hosts import host_numbers, host_reasons, merged_histograms, settle_hosts
from infermatrix.core.measure.metrics import window_stats
from infermatrix.core.types import CellResult, RequestRecord

SRC = Path(__file__).parents[2] / "src"


def _record(i: int, t0: float) -> RequestRecord:
    r = RequestRecord(stream_index=i, seq=0, sent=t0, opened=t0 - 0.001)
    r.first_token = t0 + 0.05 + 0.01 * i
    r.events = [(r.first_token + 0.02 * k, 1 + k % 2) for k in range(20)]
    r.ended = r.events[-1][0]
    return r


def test_a_record_converted_there_and_back_is_unchanged_and_keeps_its_durations():
    skew = ClockSkew(offset_s=0.040, drift=50e-6, epoch=1000.0)
    r = _record(3, 1234.5)
    before = (r.sent, r.first_token, r.ended, r.opened, list(r.events))
    convert_record(r, skew.skewed)
    assert r.sent == pytest.approx(before[0] + 0.040 + 50e-6 * 234.5, abs=1e-9)
    convert_record(r, skew.true)
    assert (r.sent, r.first_token, r.ended, r.opened) == pytest.approx(before[:4], abs=1e-9)
    assert [t for t, _ in r.events] == pytest.approx([t for t, _ in before[4]], abs=1e-9)


def test_the_estimate_of_a_skewed_clock_converts_its_stamps_back_within_the_uncertainty():
    skew = ClockSkew(offset_s=0.040, drift=50e-6, epoch=0.0)
    estimates = []
    for at in (10.0, 20.0):  # pings 0.4 ms round trips, answered 0.1 ms after sending (asymmetric)
        estimates.append(estimate_offset([Exchange(at + k, skew.skewed(at + k + 0.0001), at + k + 0.0004 + 0.0001 * k) for k in range(5)]))
    model = fit_clock(estimates)
    assert abs(model.offset_at(15.0) - skew.offset_at(15.0)) <= model.uncertainty
    for t in (10.0, 12.5, 20.0):
        assert abs(model.to_coordinator(skew.skewed(t)) - t) <= model.uncertainty
        assert abs(window_bound(model, t) - skew.skewed(t)) <= model.uncertainty
    assert abs(model.drift_ppm - 50.0) <= drift_uncertainty_ppm(estimates)


def test_skew_knob_parses_and_rejects_in_one_line():
    got = skews_from_env({"INFERMATRIX_RAY_CLOCK_SKEW": "1:40000000:50,2:-5:0"})
    assert set(got) == {1, 2} and got[1] == pytest.approx((0.04, 50e-6)) and got[2] == pytest.approx((-5e-9, 0.0))
    assert skews_from_env({}) == {}
    with pytest.raises(ValueError, match="ACTOR:OFFSET_NS:DRIFT_PPM"):
        skews_from_env({"INFERMATRIX_RAY_CLOCK_SKEW": "1:40ms"})


def _hosts(records, k, lag_ms=(1.0, 1.0, 1.0), unc_ms=0.3):
    flags = [{"host": f"h{w}/node#a{w}", "actor": w, "uncertainty_ms": unc_ms} for w in range(k)]
    from infermatrix.core.stream.loop_lag import ClientLoad

    loads = {w: ClientLoad(lag_ms[w] / 2, lag_ms[w], lag_ms[w], 10.0) for w in range(k)}
    return host_numbers(flags, k, records, (100.0, 104.0), loads, {})


def test_merged_host_histograms_equal_the_histogram_of_every_record():
    records = [_record(i, 100.0 + 0.1 * i) for i in range(9)]
    hosts = _hosts(records, 3)
    merged = merged_histograms(hosts)
    whole = window_stats(records, 100.0, 104.0)
    for name, values in (("ttft", whole.ttft_values_s), ("tbt", whole.tbt_values_s), ("itl", whole.itl_values_s)):
        want, got = histograms.decode(histograms.histogram_of(values)), histograms.decode(merged[name])
        assert got.get_total_count() == want.get_total_count() > 0
        for p in (50, 90, 99, 100):
            assert histograms.value_at(got, p) == histograms.value_at(want, p)
    assert sum(h["output_tokens"] for h in hosts) == whole.output_tokens


def test_one_slow_host_or_a_badly_known_clock_is_named():
    records = [_record(i, 100.0 + 0.1 * i) for i in range(6)]
    assert host_reasons(_hosts(records, 3), (100.0, 104.0)) == []
    slow = host_reasons(_hosts(records, 3, lag_ms=(1.0, 30.0, 1.0)), (100.0, 104.0))
    assert len(slow) == 1 and "h1/node#a1" in slow[0] and "late" in slow[0]
    blurred = host_reasons(_hosts(records, 3, unc_ms=25.0), (100.0, 104.0))
    assert len(blurred) == 3 and all("clock offset known only to ±25.0 ms" in w for w in blurred)



def test_settled_hosts_name_the_slow_one_and_a_failed_actor_makes_an_error():
    records = [_record(i, 100.0 + 0.1 * i) for i in range(6)]
    slow = _hosts(records, 3, lag_ms=(1.0, 30.0, 1.0))
    cell = CellResult(context_tokens=1024, concurrency=6, status="valid")
    settle_hosts(cell, slow, [], (100.0, 104.0), judged=True)
    assert cell.status == "client_bound" and "h1/node#a1" in cell.reason and cell.flags["client"]["hosts_why"] == [cell.reason]
    assert cell.flags["client_backend"] == "ray" and set(cell.histograms) == {"ttft", "tbt", "e2e", "itl", "ttfo"}
    bound = CellResult(context_tokens=1024, concurrency=6, status="client_bound", reason="stalls")
    settle_hosts(bound, slow, [], (100.0, 104.0), judged=True)
    assert bound.reason.startswith("stalls; client host h1/node#a1")
    unjudged = CellResult(context_tokens=1024, concurrency=6, status="error", reason="ramp")
    settle_hosts(unjudged, slow, [], (100.0, 104.0), judged=False)  # a ramp that gave up: hosts not judged
    assert unjudged.reason == "ramp" and "client" not in unjudged.flags
    failed = CellResult(context_tokens=1024, concurrency=6, status="valid")
    settle_hosts(failed, _hosts(records, 3), ["actor 2 died"], (100.0, 104.0), judged=True)
    assert (failed.status, failed.reason) == ("error", "actor 2 died")

def test_nothing_outside_the_ray_backend_imports_ray():
    # The Ray client backend, and the Ray path of `infermatrix sweep --ray` (core/run/sweep_ray.py).
    allowed = {SRC / "core/distributed/ray_pool.py", SRC / "core/distributed/ray_actor.py", SRC / "core/run/sweep_ray.py"}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "ray" or n.startswith("ray.") for n in names):
                assert path in allowed, f"{path} imports ray"
                assert node.col_offset > 0, f"{path}: ray imported at module level"


def test_without_ray_the_tests_skip_outside_ci_and_fail_under_ci(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_ray(name, *a, **kw):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="ray is not installed"):
        require_ray()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="ray missing under CI=true"):
        require_ray()


def test_default_config_is_local_and_the_client_table_is_strict():
    from infermatrix.core.config import ClientConfig

    assert ClientConfig().backend == "local"
    with pytest.raises(ValueError):
        ClientConfig(backend="ray", adress="x")  # type: ignore[call-arg]


def test_an_unreachable_or_malformed_ray_address_is_one_line_not_a_minutes_long_hang():
    import socket

    from infermatrix.core.config import ConfigError
    from infermatrix.core.distributed.ray_pool import _check_reachable

    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(ConfigError, match=f"cannot reach Ray at 127.0.0.1:{port}"):
            _check_reachable(f"127.0.0.1:{port}", timeout_s=2)
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        _check_reachable("head")
    _check_reachable(None)
    _check_reachable("auto")
