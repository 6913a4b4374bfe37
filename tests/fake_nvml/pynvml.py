"""A fake ``pynvml`` (nvidia-ml-py) with scripted counters: NVML faked at its boundary, and nowhere else.

Put this folder first on ``PYTHONPATH`` of a launched ``infermatrix run`` (or ``scripts/gpu_check.py``); the script is
the JSON in ``FAKE_NVML`` (all optional)::

    {"power_w": [300.0, 150.0],          # one GPU per entry, each drawing a constant power
     "throttle_after_mono": 12345.6,     # from this time.monotonic() on, every GPU reports throttle_mask
     "throttle_mask": 4,                 # nvmlClocksThrottleReasonSwPowerCap
     "init_error": "NoPermission",       # nvmlInit raises NVMLError_NoPermission
     "energy_mj0": 1000000,              # the energy counter at the epoch
     "power_report_scale": 1.0}          # nvmlDeviceGetPowerUsage reports power_w x this (a power reading that disagrees)

The energy counter is exact: ``energy_mj0 + power_w x 1000 x time.monotonic()`` (mJ), so a window's energy is
``power_w x window seconds`` to the float, and ``nvmlDeviceGetPowerUsage`` is ``power_w x 1000`` (mW).
"""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace

NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2
NVML_TEMPERATURE_GPU = 0
FAKE = True  # scripts/gpu_check.py says "fake NVML" in its report when it sees this


class NVMLError(Exception):
    pass


class NVMLError_NoPermission(NVMLError):  # noqa: N801 (pynvml's names)
    def __str__(self) -> str:
        return "Insufficient Permissions"


class NVMLError_NotSupported(NVMLError):  # noqa: N801
    def __str__(self) -> str:
        return "Not Supported"


def _script() -> dict:
    return json.loads(os.environ.get("FAKE_NVML") or "{}")


def _power(h: int) -> float:
    return float(_script().get("power_w", [300.0])[h])


def nvmlInit() -> None:  # noqa: N802
    if _script().get("init_error") == "NoPermission":
        raise NVMLError_NoPermission()


def nvmlShutdown() -> None:  # noqa: N802
    pass


def nvmlDeviceGetCount() -> int:  # noqa: N802
    return len(_script().get("power_w", [300.0]))


def nvmlDeviceGetHandleByIndex(i: int) -> int:  # noqa: N802
    return i


def nvmlDeviceGetName(h: int) -> str:  # noqa: N802
    return f"Fake GPU {h}"


# Every energy counter this process read: (handle, the time.monotonic() it was evaluated at, its value) — the fake's
# own record, for a test in the same process to hold a reader's stamps against.
ENERGY_READS: list[tuple[int, float, float]] = []


def nvmlDeviceGetTotalEnergyConsumption(h: int) -> int | float:  # noqa: N802
    at = time.monotonic()
    value = float(_script().get("energy_mj0", 1_000_000)) + _power(h) * 1000.0 * at
    ENERGY_READS.append((h, at, value))
    return value


def nvmlDeviceGetPowerUsage(h: int) -> int:  # noqa: N802
    return round(_power(h) * 1000 * float(_script().get("power_report_scale", 1.0)))


def nvmlDeviceGetPowerManagementLimit(h: int) -> int:  # noqa: N802
    return 700_000


def nvmlDeviceGetClockInfo(h: int, kind: int) -> int:  # noqa: N802
    return 1980 if kind == NVML_CLOCK_SM else 2619


def nvmlDeviceGetMemoryInfo(h: int) -> SimpleNamespace:  # noqa: N802
    return SimpleNamespace(total=80 * 2**30, used=40 * 2**30, free=40 * 2**30)


def nvmlDeviceGetUtilizationRates(h: int) -> SimpleNamespace:  # noqa: N802
    return SimpleNamespace(gpu=97, memory=40)


def nvmlDeviceGetTemperature(h: int, sensor: int) -> int:  # noqa: N802
    return 61


def nvmlDeviceGetCurrentClocksThrottleReasons(h: int) -> int:  # noqa: N802
    s = _script()
    after = s.get("throttle_after_mono")
    return int(s.get("throttle_mask", 0)) if after is not None and time.monotonic() >= after else 0


def nvmlDeviceGetFanSpeed(h: int) -> int:  # noqa: N802 (a call a GPU may not support)
    raise NVMLError_NotSupported()
