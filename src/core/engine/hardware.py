"""The machine an engine runs on, described as the reference report's header does: type, GPU,
GPU count, VRAM, OS, driver and CUDA version. GPUs are read with ``nvidia-smi`` where it exists;
a config's top-level ``[hardware]`` table overrides any field (the runner merges it over this).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from collections import Counter
from typing import Any

import psutil

__all__ = ["detect_hardware", "query_gpus", "nvidia_smi_csv", "parse_smi_csv", "cuda_version", "parse_number", "NVIDIA_SMI"]

NVIDIA_SMI = "nvidia-smi"
GPU_FIELDS = ("index", "name", "memory.total", "driver_version", "pci.bus_id", "uuid")
_CUDA = re.compile(r"CUDA Version:\s*([\d.]+)")


def parse_number(raw: str) -> float | None:
    """An nvidia-smi value (``nounits``): ``None`` for ``[N/A]``, ``[Not Supported]`` and friends."""
    raw = raw.strip()
    try:
        return float(raw)
    except ValueError:
        return None


def nvidia_smi_csv(fields: tuple[str, ...] | list[str], nvidia_smi: str = NVIDIA_SMI, timeout_s: float = 10.0) -> list[dict[str, str]] | None:
    """One row per GPU of ``nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits``, or ``None``
    when nvidia-smi is absent or fails (no driver, no GPU)."""
    exe = shutil.which(nvidia_smi)
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_smi_csv(out.stdout, fields) if out.returncode == 0 else None


def parse_smi_csv(text: str, fields: tuple[str, ...] | list[str]) -> list[dict[str, str]] | None:
    """Rows of ``--format=csv,noheader,nounits`` output; ``None`` when a line has the wrong shape."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(fields):
            return None  # not the format asked for: trust nothing
        rows.append(dict(zip(fields, values)))
    return rows


def cuda_version(nvidia_smi: str = NVIDIA_SMI, timeout_s: float = 10.0) -> str | None:
    """The CUDA version the driver supports, from the header of plain ``nvidia-smi``."""
    exe = shutil.which(nvidia_smi)
    if exe is None:
        return None
    try:
        out = subprocess.run([exe], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = _CUDA.search(out.stdout)
    return m.group(1) if m else None


def query_gpus(nvidia_smi: str = NVIDIA_SMI) -> list[dict[str, Any]]:
    """Every GPU nvidia-smi sees: index, name, memory (MiB), driver, PCI bus, UUID. Empty without one."""
    rows = nvidia_smi_csv(GPU_FIELDS, nvidia_smi) or []
    gpus = []
    for row in rows:
        mem = parse_number(row["memory.total"])
        gpus.append({
            "index": int(parse_number(row["index"]) or 0), "name": row["name"],
            "memory_mib": int(mem) if mem is not None else None, "driver": row["driver_version"],
            "pci_bus_id": row["pci.bus_id"], "uuid": row["uuid"],
        })  # fmt: skip
    return gpus


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _short_gpu_name(name: str) -> str:
    return re.sub(r"^NVIDIA\s+", "", name).strip()


def detect_hardware(nvidia_smi: str = NVIDIA_SMI) -> dict[str, Any]:
    """This machine, as the reference header shows it. GPU fields only where nvidia-smi sees GPUs."""
    hw: dict[str, Any] = {
        "os": platform.system().lower(),
        "os_release": platform.release(),
        "arch": platform.machine(),
        "cpu": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
    }
    gpus = query_gpus(nvidia_smi)
    if not gpus:
        hw["type"] = "CPU"
        return hw
    names = Counter(_short_gpu_name(g["name"]) for g in gpus)
    mems = [g["memory_mib"] for g in gpus if g["memory_mib"]]
    each = round(mems[0] / 1024) if mems and len(set(mems)) == 1 else None
    total = round(sum(mems) / 1024) if mems else None
    hw.update({
        "type": "Discrete GPU",
        "gpu": " + ".join(f"{n} × {name}" if len(names) > 1 else name for name, n in names.items()),
        "gpu_count": len(gpus),
        "vram": (f"{total} GB ({len(gpus)} × {each} GB)" if each else f"{total} GB") if total else None,
        "vram_gb": total,
        "driver": gpus[0]["driver"],
        "cuda": cuda_version(nvidia_smi),
        "gpus": gpus,
    })  # fmt: skip
    return hw
