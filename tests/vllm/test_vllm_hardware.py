"""Hardware detection and GPU telemetry, against a fake nvidia-smi that prints a 4×H200 node's output."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from infermatrix.core.engine.hardware import detect_hardware, query_gpus
from infermatrix.core.store import Store
from infermatrix.core.store.telemetry import save_gpu_samples
from infermatrix.core.engine.telemetry import GpuSampler

pytestmark = pytest.mark.slow  # runs a fake nvidia-smi as a process in most tests

FAKE = Path(__file__).with_name("fake_nvidia_smi.py")


@pytest.fixture
def fake_gpus(tmp_path, monkeypatch):
    """``nvidia-smi`` on PATH is the fake (a real executable file, run as a subprocess)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "nvidia-smi"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return exe


@pytest.fixture
def no_gpus(tmp_path, monkeypatch):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def test_detects_four_h200_like_the_reference_header(fake_gpus):
    hw = detect_hardware()
    assert hw["type"] == "Discrete GPU"
    assert hw["gpu"] == "H200"
    assert hw["gpu_count"] == 4
    assert hw["vram"] == "562 GB (4 × 140 GB)"  # 143,771 MiB each, in GiB as nvidia-smi counts
    assert hw["driver"] == "570.124.06"
    assert hw["cuda"] == "12.8"
    assert hw["os"] == "linux"
    assert [g["pci_bus_id"] for g in hw["gpus"]] == ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0"]
    assert all(g["memory_mib"] == 143771 for g in hw["gpus"])


def test_no_nvidia_smi_means_a_cpu_machine(no_gpus):
    hw = detect_hardware()
    assert hw["type"] == "CPU"
    assert "gpu_count" not in hw
    assert hw["cpu_cores"] >= 1


def test_failing_driver_means_no_gpus(fake_gpus, monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_FAIL", "1")
    assert query_gpus() == []
    assert detect_hardware()["type"] == "CPU"


@pytest.mark.anyio
async def test_sampler_reads_every_gpu_once_per_interval(fake_gpus):
    """Judged by the sampler's own timestamps, not by how many readings a sleep happened to hold: the block waits
    for the readings it needs (an event), and the fixed cadence means reading k is never before start + k x interval."""
    import anyio

    interval = 0.2
    sampler = GpuSampler(interval_s=interval)
    assert sampler.available
    t0 = time.monotonic()
    async with sampler.sampling() as samples:
        with anyio.fail_after(120):  # a guard against a hang, not a timing bar
            while len({s.t_mono for s in samples}) < 3:
                await anyio.sleep(0.01)
        t_end = time.monotonic()
    assert sampler.errors == 0
    instants = sorted({s.t_mono for s in samples})
    # one reading at the start (not before the block began), one per interval, one when the block ended
    assert t0 <= instants[0] and instants[-1] >= t_end and len(instants) >= 4
    for k, t in enumerate(instants[:-1]):
        assert t >= t0 + k * interval, (k, t - t0)  # never ahead of its cadence (the loop's start is after t0)
    for t in instants:
        assert sorted(s.gpu for s in samples if s.t_mono == t) == [0, 1, 2, 3]
    for s in samples:
        assert 400 <= s.power_w <= 460
        assert 1960 <= s.sm_clock_mhz <= 1980
        assert 120_600 <= s.memory_used_mib <= 120_710
        assert 94 <= s.utilization_pct <= 98
        assert s.temperature_c is not None


@pytest.mark.anyio
async def test_sampler_without_nvidia_smi_yields_nothing(no_gpus):
    sampler = GpuSampler(interval_s=0.1)
    assert not sampler.available
    async with sampler.sampling() as samples:
        import anyio

        await anyio.sleep(0.3)
    assert samples == []


@pytest.mark.anyio
async def test_sampler_counts_failures(fake_gpus, monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_FAIL", "1")
    sampler = GpuSampler(interval_s=0.2)
    assert await sampler.sample_once() == []
    assert sampler.errors == 1


def test_sampler_rejects_a_zero_interval():
    with pytest.raises(ValueError):
        GpuSampler(interval_s=0)


@pytest.mark.anyio
async def test_samples_are_stored_per_cell(fake_gpus, tmp_path):
    sampler = GpuSampler(interval_s=0.2)
    a = await sampler.sample_once() + await sampler.sample_once()
    b = await sampler.sample_once()
    with Store(tmp_path / "t.duckdb") as store:
        run_id = store.create_run({"engine": "vllm", "model": "qwen", "status": "running", "config": {}})
        assert save_gpu_samples(store, run_id, 8192, 4, a) == 8
        assert save_gpu_samples(store, run_id, 8192, 8, b) == 4
        assert save_gpu_samples(store, run_id, 8192, 4, a[:4]) == 4  # saving a cell again replaces it
        _, rows = store.query(
            "SELECT concurrency, gpu, samples, power_w, memory_used_mib_max FROM gpu_cell_summary "
            "WHERE run_id = ? ORDER BY concurrency, gpu", [run_id])  # fmt: skip
    assert [(r[0], r[1], r[2]) for r in rows] == [(4, g, 1) for g in range(4)] + [(8, g, 1) for g in range(4)]
    assert all(400 <= r[3] <= 460 and r[4] > 120_000 for r in rows)


def test_saving_no_samples_still_creates_the_table(tmp_path):
    with Store(tmp_path / "t.duckdb") as store:
        assert save_gpu_samples(store, "r1", 1024, 1, []) == 0
        cols, rows = store.query("SELECT count(*) FROM gpu_samples")
    assert rows == [(0,)]
