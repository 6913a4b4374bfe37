"""scripts/gpu-check.sh and its Python part against the fake pynvml (tests/fake_nvml): the check that runs on a lent
GPU is tested here first. The energy counter against integrated power passes when they agree and fails (exit 1) when
the power reading is off by more than the stated share; throttle reasons are recorded; no NVML is one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
FAKE = str(ROOT / "tests" / "fake_nvml")


def _check(tmp_path: Path, script: dict | None, *args: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    out = tmp_path / "g.json"
    env = {**os.environ, "PYTHON": sys.executable, "INFERMATRIX_GPU_CHECK_DIR": str(tmp_path / "none")}
    if script is not None:
        env.update(PYTHONPATH=FAKE, FAKE_NVML=json.dumps(script))
    else:
        env.pop("PYTHONPATH", None)
    proc = subprocess.run([str(ROOT / "scripts" / "gpu-check.sh"), "--idle-s", "1", "--interval-s", "0.2", "--no-load", "--json", str(out), *args],
                          capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    return proc, json.loads(out.read_text()) if out.exists() else None


def test_the_counter_agrees_with_integrated_power_and_throttle_reasons_are_recorded(tmp_path):
    proc, report = _check(tmp_path, {"power_w": [300.0, 150.0], "throttle_after_mono": 0, "throttle_mask": 0x44})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report is not None and report["gpus"] == 2 and report["fake_nvml"] is True
    gpus = report["phases"]["idle"]["gpus"]
    for g, watts in zip(gpus, (300.0, 150.0)):
        assert g["agrees"] is True and abs(g["counter_vs_power"]) < 1e-3
        assert g["counter_j"] == pytest.approx(watts * g["span_s"], rel=1e-3)
        assert g["throttle_reasons"] == ["sw_power_cap", "hw_thermal"] and g["samples"] >= 4
    assert "through the FAKE pynvml" in proc.stdout and "every check passed" in proc.stdout


def test_a_power_reading_off_by_more_than_the_share_fails(tmp_path):
    proc, report = _check(tmp_path, {"power_w": [300.0], "power_report_scale": 1.1}, "--share", "0.05")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    g = report["phases"]["idle"]["gpus"][0]
    assert g["agrees"] is False and g["counter_vs_power"] == pytest.approx(1 / 1.1 - 1, abs=1e-3)
    assert "OUTSIDE 5%" in proc.stdout and "a check FAILED" in proc.stdout


def test_no_nvml_is_one_line_and_exit_2(tmp_path):
    proc, report = _check(tmp_path, None)
    assert proc.returncode == 2 and report is None
    assert proc.stderr.strip().splitlines()[-1].startswith("gpu-check: no NVML:")


def test_the_load_kernel_assembles_for_hopper(tmp_path):
    """The load's PTX is what the GPU's driver will JIT: ptxas (where the CUDA toolkit is installed) accepts it for sm_90."""
    import re
    import shutil

    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("no ptxas (CUDA toolkit) on this machine")
    ptx = re.search(r'PTX = b"""(.*?)"""', (ROOT / "scripts" / "gpu_check.py").read_text(), re.S)
    assert ptx is not None
    (tmp_path / "burn.ptx").write_text(ptx.group(1))
    proc = subprocess.run([ptxas, "-arch=sm_90", str(tmp_path / "burn.ptx"), "-o", str(tmp_path / "burn.cubin")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
