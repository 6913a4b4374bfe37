"""GPU telemetry while a cell runs: power, SM clock, memory used and utilisation per GPU, once a second.

    sampler = GpuSampler(interval_s=1.0)
    async with sampler.sampling() as samples:    # a list that fills while the block runs
        result = await runner.measure(ctx, prompts)
    save_gpu_samples(store, run_id, ctx, n, samples)   # infermatrix.core.store.telemetry

Read with ``nvidia-smi --query-gpu=…`` (started as an async subprocess, so cancelling stops it).
Where there is no nvidia-smi, or it fails, ``sampling()`` yields an empty list and costs nothing.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass

import anyio

from infermatrix.core.engine.hardware import NVIDIA_SMI, parse_number, parse_smi_csv

__all__ = ["GpuSample", "GpuSampler", "SAMPLE_FIELDS"]

SAMPLE_FIELDS = ("index", "power.draw", "clocks.sm", "memory.used", "utilization.gpu", "temperature.gpu")


@dataclass
class GpuSample:
    """One GPU at one instant. ``t`` is wall-clock epoch seconds, ``t_mono`` is ``time.monotonic()``
    (the clock of a cell's ``window_start``/``window_end``). ``None`` where the GPU doesn't say."""

    t: float
    t_mono: float
    gpu: int
    power_w: float | None
    sm_clock_mhz: float | None
    memory_used_mib: float | None
    utilization_pct: float | None
    temperature_c: float | None

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


class GpuSampler:
    """Samples every GPU nvidia-smi sees, every ``interval_s`` seconds, inside ``sampling()``."""

    def __init__(self, interval_s: float = 1.0, nvidia_smi: str = NVIDIA_SMI, timeout_s: float = 5.0):
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.interval_s = interval_s
        self.nvidia_smi = nvidia_smi
        self.timeout_s = timeout_s
        self.errors = 0  # failed samples (nvidia-smi error, timeout, unreadable output)
        self._exe = shutil.which(nvidia_smi)

    def off(self) -> None:
        """Sample nothing from now on (NVML reads the GPUs instead, or ``telemetry.gpu_interval_s = 0``)."""
        self._exe = None

    @property
    def available(self) -> bool:
        """Whether nvidia-smi is on PATH (a sample may still fail: then it is skipped and counted)."""
        return self._exe is not None

    async def sample_once(self) -> list[GpuSample]:
        """One reading of every GPU; empty when nvidia-smi is absent or its answer can't be read."""
        if self._exe is None:
            return []
        t, t_mono = time.time(), time.monotonic()
        argv = [self._exe, f"--query-gpu={','.join(SAMPLE_FIELDS)}", "--format=csv,noheader,nounits"]
        try:
            with anyio.fail_after(self.timeout_s):
                done = await anyio.run_process(argv, check=False, stderr=subprocess.DEVNULL)
        except (OSError, TimeoutError):
            self.errors += 1
            return []
        rows = parse_smi_csv(done.stdout.decode(errors="replace"), SAMPLE_FIELDS) if done.returncode == 0 else None
        if rows is None:
            self.errors += 1
            return []
        out: list[GpuSample] = []
        for row in rows:
            index = parse_number(row["index"])
            out.append(GpuSample(
                t=t, t_mono=t_mono, gpu=int(index) if index is not None else len(out),
                power_w=parse_number(row["power.draw"]), sm_clock_mhz=parse_number(row["clocks.sm"]),
                memory_used_mib=parse_number(row["memory.used"]), utilization_pct=parse_number(row["utilization.gpu"]),
                temperature_c=parse_number(row["temperature.gpu"]),
            ))  # fmt: skip
        return out

    async def _loop(self, samples: list[GpuSample]) -> None:
        start = time.monotonic()
        k = 0
        while True:
            samples.extend(await self.sample_once())
            k += 1
            # Fixed cadence (start + k × interval), so a slow nvidia-smi doesn't stretch the period.
            await anyio.sleep(max(0.0, start + k * self.interval_s - time.monotonic()))

    @asynccontextmanager
    async def sampling(self) -> AsyncIterator[list[GpuSample]]:
        """Sample in the background while the block runs; the yielded list holds the samples.

        The first sample is taken at once, the last when the block ends (so even a short block
        has a reading from its start and its end)."""
        samples: list[GpuSample] = []
        if self._exe is None:
            yield samples
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._loop, samples)
            try:
                yield samples
            finally:
                tg.cancel_scope.cancel()
        with anyio.CancelScope(shield=True):
            samples.extend(await self.sample_once())
