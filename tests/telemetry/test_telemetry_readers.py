"""The telemetry readers on their own (issue 32): the engine's series picked from a metrics page by the traits'
names, NVML through the fake ``pynvml`` (tests/fake_nvml, NVML's boundary), and a metrics page that starts failing
mid-run: one line says so, the reads go on. No process is started (a loopback server on a thread)."""

from __future__ import annotations

import http.server
import json
import sys
import threading
import time
from pathlib import Path

import pytest

from infermatrix.core.engine.traits import Gauges, MetricNames
from infermatrix.core.telemetry.engine_series import page_rows
from infermatrix.core.telemetry.recorder import Telemetry

FAKE = Path(__file__).parents[1] / "fake_nvml"

NAMES = MetricNames(running="e:running", waiting="e:waiting", kv_usage="e:kv", generated_tokens="e:gen", preemptions="e:preempt")
PAGE = """# HELP e:running r
# TYPE e:running gauge
e:running{engine="0"} 3.0
e:running{engine="1"} 4.0
# TYPE e:waiting gauge
e:waiting{engine="0"} 1.0
# TYPE e:gen counter
e:gen_total{engine="0"} 1000.0
e:gen_created{engine="0"} 1.7e9
# TYPE e:kv gauge
e:kv{engine="0"} 0.5
# TYPE e:other gauge
e:other 9.0
"""


def test_only_the_traits_series_are_kept_with_their_labels():
    rows = page_rows(PAGE, NAMES)
    assert sorted((m, json.loads(lab).get("engine"), v) for m, lab, v in rows) == [
        ("generated_tokens", "0", 1000.0), ("kv_usage", "0", 0.5), ("running", "0", 3.0), ("running", "1", 4.0), ("waiting", "0", 1.0),
    ]  # fmt: skip
    assert all(json.loads(lab)["__name__"].startswith("e:") for _, lab, _ in rows)  # the vendor's name is kept, in the labels


def test_counters_counted_at_request_end_are_not_sampled():
    names = MetricNames(running="e:running", generated_tokens="e:gen", counted_at_request_end=True)
    assert {m for m, _, _ in page_rows(PAGE, names)} == {"running"}


def test_an_engine_with_its_own_parser_gives_its_fields():
    names = MetricNames(parse=lambda page: Gauges(running=2, kv_usage=0.25))
    assert sorted(page_rows("{}", names)) == [("kv_usage", "{}", 0.25), ("running", "{}", 2.0)]


class _Flaky(http.server.BaseHTTPRequestHandler):
    answered = 0
    good = 3  # reads answered before the page starts failing

    def do_GET(self):  # noqa: N802
        cls = type(self)
        cls.answered += 1
        ok = cls.answered <= cls.good
        body = PAGE.encode() if ok else b"boom"
        self.send_response(200 if ok else 500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _until(cond, timeout_s=20.0):
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_a_metrics_page_failing_mid_run_is_said_once_and_reads_go_on():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    tel = Telemetry(0.02, 0, (url, {}, NAMES), lambda: "window")
    try:
        tel.start()
        _until(lambda: tel.tickers["engine"].reads >= 8)
        engine_rows, gpu_rows = tel.drain()
        notes = tel.take_notes()
        _until(lambda: tel.tickers["engine"].reads >= 10)
        assert tel.take_notes() == []  # said once
    finally:
        tel.stop()
        server.shutdown()
    assert gpu_rows == []
    assert {r[0] for r in engine_rows} and len({r[1] for r in engine_rows}) == 3  # the three good reads, kept
    assert all(r[2] == "window" for r in engine_rows)  # tagged with the run's phase at the read
    assert len(notes) == 1 and notes[0].startswith(f"engine metrics at {url}: a read failed (HTTPStatusError")
    cost = tel.costs()[0]
    assert cost["source"] == "engine" and cost["reads"] >= 10 and cost["failures"] >= 7 and cost["cpu_s"] > 0


@pytest.fixture
def fake_nvml(monkeypatch):
    monkeypatch.syspath_prepend(str(FAKE))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    yield monkeypatch
    sys.modules.pop("pynvml", None)


def test_nvml_reads_every_gpu_and_its_energy_counter_is_exact(fake_nvml):
    from infermatrix.core.telemetry.nvml import open_nvml, throttle_names

    fake_nvml.setenv("FAKE_NVML", json.dumps({"power_w": [300.0, 150.0], "throttle_after_mono": 0, "throttle_mask": 0x14}))
    import pynvml  # the fake: its record of each counter read

    reader, why = open_nvml()
    assert reader is not None and why is None
    spans = []  # each read's own span on the monotonic clock
    for _ in range(2):
        a = time.monotonic()
        reader.read()
        spans.append((a, time.monotonic()))
        time.sleep(0.2)  # reads apart as a run's are
    rows = reader.drain()
    assert [r[2] for r in rows] == [0, 1, 0, 1]
    first, second = rows[0], rows[2]
    t, t_mono, gpu, power_w, energy_mj, sm, mem_clock, mem_used, util, temp, mask = second
    assert (power_w, sm, mem_clock, mem_used, util, temp) == (300.0, 1980, 2619, 40 * 1024, 97, 61)
    # The counter is stored as the fake read it, each GPU's to its row.
    reads = [r for r in pynvml.ENERGY_READS if r[0] == 0][-2:]
    assert [first[4], energy_mj] == [v for _, _, v in reads]
    # It is stamped where it was read: inside its own read, so a stamp is off the counter's moment by less than the read
    # lasted (tens of µs at idle; a starved process's read can last a millisecond). Its rise over the stamps is then the
    # power to within the two reads' durations over the span between them — the bound of the reads measured here.
    assert all(a <= r[1] <= b for r, (a, b) in zip((first, second), spans)), (first[1], second[1], spans)
    assert all(a <= at <= b for (_, at, _), (a, b) in zip(reads, spans))
    slack = sum(b - a for a, b in spans) / (t_mono - first[1])
    assert (energy_mj - first[4]) / 1000 / (t_mono - first[1]) == pytest.approx(300.0, rel=slack), (slack, spans)
    assert throttle_names(mask) == ["sw_power_cap", "sync_boost"]


def test_nvml_without_permission_is_one_line_and_no_reader(fake_nvml):
    from infermatrix.core.telemetry.nvml import open_nvml

    fake_nvml.setenv("FAKE_NVML", json.dumps({"init_error": "NoPermission"}))
    reader, why = open_nvml()
    assert reader is None and why == "NVML present but not usable (NVMLError_NoPermission: Insufficient Permissions)"
    tel = Telemetry(0, 1.0, None, lambda: "x")
    tel.start()
    assert not tel.nvml and tel.take_notes() == [
        "GPU telemetry: NVML present but not usable (NVMLError_NoPermission: Insufficient Permissions); no energy figures "
        "(the nvidia-smi sampler is used where it runs)"
    ]
    tel.stop()


def test_no_nvml_library_is_silent(monkeypatch):
    from infermatrix.core.telemetry.nvml import open_nvml

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as if not installed
    assert open_nvml() == (None, None)
