"""GPU telemetry on a real GPU, in one short call (issue 32 item 3; driven by scripts/gpu-check.sh, docs/telemetry.md).

Samples every GPU through infermatrix's own NVML reader (src/core/telemetry/nvml.py, loaded from this checkout by
path, so it needs no installed package but ``pynvml``) for ``--idle-s`` seconds at idle, then ``--load-s`` seconds
under a load it makes itself with no package at all (a PTX busy loop launched through the CUDA driver, libcuda, by
ctypes), and for each GPU and phase prints: samples, mean/max power, the energy counter's rise against the power
reads integrated over the same span (trapezoids) and whether they agree within ``--share`` (default 5 %: NVML's power
reading is itself an average over about a second), clocks, temperature, utilisation and every throttle reason seen.
``--json FILE`` writes the figures. Exit 0 when every check passed, 1 when one failed, 2 without NVML.

Tested against the fake pynvml (tests/fake_nvml) only, until a run on a lent GPU puts its figures in docs/performance.md.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src" / "core" / "telemetry"

# A busy loop of dependent FMAs per thread, then one store: enough to hold every SM near its power limit.
PTX = b"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry burn(.param .u64 out, .param .u32 iters)
{
    .reg .f32 %f<4>;
    .reg .u32 %r<4>;
    .reg .u64 %rd<3>;
    .reg .pred %p;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [iters];
    mov.u32 %r2, %tid.x;
    cvt.rn.f32.u32 %f1, %r2;
    mov.f32 %f2, 0f3F7FFFFF;
    mov.u32 %r3, 0;
LOOP:
    fma.rn.f32 %f1, %f1, %f2, 0f3A83126F;
    fma.rn.f32 %f3, %f1, %f2, 0f3A83126F;
    fma.rn.f32 %f1, %f3, %f2, 0f3A83126F;
    add.u32 %r3, %r3, 1;
    setp.lt.u32 %p, %r3, %r1;
    @%p bra LOOP;
    cvta.to.global.u64 %rd2, %rd1;
    st.global.f32 [%rd2], %f1;
    ret;
}
"""


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"imx_{name}", SRC / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


class CudaLoad:
    """The PTX loop on every GPU, launched again and again until ``stop`` (one thread per GPU, its own context)."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.launches = 0
        try:
            self.cu = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise RuntimeError(f"no CUDA driver ({exc})") from None
        self._check(self.cu.cuInit(0), "cuInit")
        n = ctypes.c_int()
        self._check(self.cu.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
        self.devices = n.value

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed (CUresult {rc})")

    def _burn(self, ordinal: int) -> None:
        cu, c = self.cu, ctypes
        try:
            dev, ctx, mod, fn, out = c.c_int(), c.c_void_p(), c.c_void_p(), c.c_void_p(), c.c_uint64()
            self._check(cu.cuDeviceGet(c.byref(dev), ordinal), "cuDeviceGet")
            self._check(cu.cuCtxCreate_v2(c.byref(ctx), 0, dev), "cuCtxCreate")
            self._check(cu.cuModuleLoadData(c.byref(mod), c.c_char_p(PTX)), "cuModuleLoadData")
            self._check(cu.cuModuleGetFunction(c.byref(fn), mod, b"burn"), "cuModuleGetFunction")
            self._check(cu.cuMemAlloc_v2(c.byref(out), 4), "cuMemAlloc")
            iters = c.c_uint32(200_000)
            params = (c.c_void_p * 2)(c.cast(c.byref(out), c.c_void_p), c.cast(c.byref(iters), c.c_void_p))
            while not self.stop.is_set():
                self._check(cu.cuLaunchKernel(fn, 4096, 1, 1, 256, 1, 1, 0, None, params, None), "cuLaunchKernel")
                self._check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
                self.launches += 1
        except RuntimeError as exc:
            self.errors.append(f"GPU {ordinal}: {exc}")

    def start(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self._burn, args=(i,), daemon=True) for i in range(self.devices)]
        for t in threads:
            t.start()
        return threads


def _phase(rows: list[tuple[Any, ...]], gpu: int, share: float, names: Any) -> dict[str, Any]:
    """One GPU's figures over one phase's rows ``(t, t_mono, gpu, power_w, energy_mj, sm, mem, used, util, temp, mask)``."""
    mine = sorted((r for r in rows if r[2] == gpu), key=lambda r: r[1])
    pw = [(r[1], r[3]) for r in mine if r[3] is not None]
    en = [(r[1], r[4]) for r in mine if r[4] is not None]
    mask = 0
    for r in mine:
        mask |= r[10] or 0
    out: dict[str, Any] = {"gpu": gpu, "samples": len(mine), "span_s": mine[-1][1] - mine[0][1] if len(mine) > 1 else 0.0,
                           "power_w_mean": sum(p for _, p in pw) / len(pw) if pw else None, "power_w_max": max((p for _, p in pw), default=None),
                           "sm_clock_mhz_mean": _mean(r[5] for r in mine), "mem_clock_mhz_mean": _mean(r[6] for r in mine),
                           "temperature_c_max": max((r[9] for r in mine if r[9] is not None), default=None),
                           "utilization_pct_mean": _mean(r[8] for r in mine), "throttle_reasons": names(mask), "throttle_mask": mask}  # fmt: skip
    if len(en) > 1 and len(pw) > 1:
        counter_j = (en[-1][1] - en[0][1]) / 1000.0
        lo, hi = en[0][0], en[-1][0]
        pts = [(t, p) for t, p in pw if lo <= t <= hi]
        integrated_j = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(pts, pts[1:]))
        integrated_j *= (hi - lo) / (pts[-1][0] - pts[0][0]) if len(pts) > 1 and pts[-1][0] > pts[0][0] else 1.0
        out.update(counter_j=counter_j, integrated_j=integrated_j,
                   counter_vs_power=counter_j / integrated_j - 1 if integrated_j else None)  # fmt: skip
        out["agrees"] = out["counter_vs_power"] is not None and abs(out["counter_vs_power"]) <= share
    else:
        out.update(counter_j=None, integrated_j=None, counter_vs_power=None, agrees=None)
    return out


def _mean(values: Any) -> float | None:
    vs = [v for v in values if v is not None]
    return sum(vs) / len(vs) if vs else None


def _sample(reader: Any, ticker_mod: Any, seconds: float, interval_s: float) -> tuple[list[tuple[Any, ...]], dict[str, float]]:
    ticker = ticker_mod.Ticker("gpu-check", interval_s, reader.read)
    ticker.start()
    time.sleep(seconds)  # the phase's length: what is measured is what the reads say, not this sleep
    ticker.stop()
    return reader.drain(), {"reads": ticker.reads, "cpu_ms_per_read": 1000 * ticker.cpu_s / max(ticker.reads, 1),
                            "wall_ms_per_read": 1000 * ticker.wall_s / max(ticker.reads, 1)}  # fmt: skip


def _print(phase: str, figs: list[dict[str, Any]], cost: dict[str, float], share: float) -> None:
    print(f"{phase}: {cost['reads']} reads, {cost['wall_ms_per_read']:.2f} ms and {cost['cpu_ms_per_read']:.2f} ms CPU per read (all GPUs)")
    for f in figs:
        agree = "—" if f["agrees"] is None else f"{f['counter_vs_power']:+.2%} ({'within' if f['agrees'] else 'OUTSIDE'} {share:.0%})"
        w = "—" if f["power_w_mean"] is None else f"{f['power_w_mean']:.1f} W mean, {f['power_w_max']:.1f} max"
        print(f"  GPU {f['gpu']}: {f['samples']} samples over {f['span_s']:.1f} s; {w}; energy counter "
              f"{f['counter_j'] if f['counter_j'] is None else round(f['counter_j'], 1)} J vs integrated power "
              f"{f['integrated_j'] if f['integrated_j'] is None else round(f['integrated_j'], 1)} J: {agree}; "
              f"SM {f['sm_clock_mhz_mean']} MHz, mem {f['mem_clock_mhz_mean']} MHz, util {f['utilization_pct_mean']} %, "
              f"max {f['temperature_c_max']} °C; throttle reasons: {', '.join(f['throttle_reasons']) or 'none'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle-s", type=float, default=60.0)
    ap.add_argument("--load-s", type=float, default=60.0)
    ap.add_argument("--interval-s", type=float, default=1.0)
    ap.add_argument("--share", type=float, default=0.05, help="largest |counter / integrated power - 1| that passes")
    ap.add_argument("--no-load", action="store_true", help="idle only")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    nvml, ticker_mod = _load("nvml"), _load("ticker")
    reader, why = nvml.open_nvml()
    if reader is None:
        print(f"gpu-check: no NVML: {why or 'pynvml is not importable (PYTHONPATH?)'}", file=sys.stderr)
        return 2
    fake = bool(getattr(reader.nv, "FAKE", False))
    gpus = len(reader.handles)
    print(f"gpu-check: {gpus} GPU(s) through {'the FAKE pynvml' if fake else 'NVML'}; sampling every {a.interval_s:g} s")
    report: dict[str, Any] = {"gpus": gpus, "fake_nvml": fake, "share": a.share, "interval_s": a.interval_s, "phases": {}}
    phases = [("idle", a.idle_s)] + ([] if a.no_load else [("load", a.load_s)])
    ok = True
    for phase, seconds in phases:
        load = None
        if phase == "load":
            try:
                load = CudaLoad()
                load.start()
            except RuntimeError as exc:
                print(f"load: not made ({exc}); load phase skipped")
                report["phases"]["load"] = {"skipped": str(exc)}
                continue
        rows, cost = _sample(reader, ticker_mod, seconds, a.interval_s)
        if load is not None:
            load.stop.set()
        figs = [_phase(rows, g, a.share, nvml.throttle_names) for g in range(gpus)]
        _print(phase, figs, cost, a.share)
        extra = {} if load is None else {"kernel_launches": load.launches, "load_errors": load.errors}
        report["phases"][phase] = {"gpus": figs, "cost": cost, **extra}
        ok = ok and all(f["agrees"] is not False for f in figs) and not (load and load.errors)
    reader.close()
    if a.json is not None:
        a.json.write_text(json.dumps(report, indent=1))
    print(f"gpu-check: {'every check passed' if ok else 'a check FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
