"""Every GPU through NVML (``nvidia-ml-py``, imported as ``pynvml``; the optional extra ``[nvml]``): power, the
total-energy counter, SM and memory clocks, memory used, utilisation, temperature and throttle reasons.

``open_nvml()`` returns an :class:`NvmlReader`, or ``None`` with a one-line reason: no library (then the
``nvidia-smi`` sampler of core/engine/telemetry.py is the fallback), or a library that cannot start (no
permission, no driver). A value a GPU does not report (``NVMLError`` on that call) is ``None``, not a failure.
Tests replace ``pynvml`` with a scripted fake at this boundary (tests/fake_nvml/pynvml.py); nothing else is faked.
"""

from __future__ import annotations

import importlib
import time
from typing import Any, Callable

from infermatrix.core.telemetry.ticker import RowBuffer

__all__ = ["NvmlReader", "open_nvml", "THROTTLE_REASONS", "THROTTLING", "throttle_names", "GPU_SERIES_FIELDS"]

# nvmlClocksThrottleReason* bits (NVML's nvml.h; newer drivers call them clocks-event reasons, same bits).
THROTTLE_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
    0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks",
}
# The bits that mean the GPU ran slower than it could because of power or heat: a cell measured while one was
# set is flagged ``throttled``. Idle, application clocks, sync boost and display clocks are recorded, not flagged.
THROTTLING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80

GPU_SERIES_FIELDS = ("power_w", "energy_mj", "sm_clock_mhz", "mem_clock_mhz", "memory_used_mib", "utilization_pct",
                     "temperature_c", "throttle_mask")  # fmt: skip


def throttle_names(mask: int | None) -> list[str]:
    return [] if not mask else [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def open_nvml() -> tuple[NvmlReader | None, str | None]:
    """An NVML reader of every GPU, or ``(None, why)``; ``why`` is ``None`` when the library is simply absent."""
    try:
        nv = importlib.import_module("pynvml")
    except ImportError:
        return None, None
    try:
        nv.nvmlInit()
        count = int(nv.nvmlDeviceGetCount())
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    except Exception as exc:  # NVMLError_NoPermission, _DriverNotLoaded, _LibraryNotFound …
        return None, f"NVML present but not usable ({type(exc).__name__}: {exc})"
    if not handles:
        return None, "NVML present but it sees no GPU"
    return NvmlReader(nv, handles), None


class NvmlReader(RowBuffer):
    """One read of every GPU per ``read()``; rows ``(t, t_mono, gpu, *GPU_SERIES_FIELDS)`` taken by ``drain()``."""

    def __init__(self, nv: Any, handles: list[Any]):
        self.nv, self.handles = nv, handles
        super().__init__()  # rows: (t, t_mono, gpu, *GPU_SERIES_FIELDS)

    def _get(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception:  # NVMLError_NotSupported and kin: this GPU doesn't say
            return None

    def _gpu(self, h: Any) -> tuple[Any, ...]:
        nv, get = self.nv, self._get
        t0 = time.monotonic()
        energy = get(lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h))  # mJ since the driver loaded
        t_mono = (t0 + time.monotonic()) / 2  # the energy counter is what windows are cut by: stamp it closely
        power = get(lambda: nv.nvmlDeviceGetPowerUsage(h))  # mW
        mem = get(lambda: nv.nvmlDeviceGetMemoryInfo(h))
        util = get(lambda: nv.nvmlDeviceGetUtilizationRates(h))
        # newer drivers' name first (clocks-event reasons, the same bits), then the older one
        reasons = get(lambda: getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", nv.nvmlDeviceGetCurrentClocksThrottleReasons)(h))
        return (
            t_mono, None if power is None else power / 1000.0, energy,
            get(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)), get(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
            None if mem is None else mem.used / 2**20, None if util is None else util.gpu,
            get(lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)), reasons,
        )  # fmt: skip

    def read(self) -> None:
        rows = []
        for i, h in enumerate(self.handles):
            t_mono, *values = self._gpu(h)
            if all(v is None for v in values):
                self.failures += 1
                self.last_error = f"GPU {i} answered nothing"
                continue
            rows.append((time.time() - (time.monotonic() - t_mono), t_mono, i, *values))
        self.keep(rows)

    def close(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except Exception:
            pass
