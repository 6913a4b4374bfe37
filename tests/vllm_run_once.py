"""One real vLLM run for the whole suite, shared by every test that only reads it.

Launching vLLM on CPU costs about a minute of both cores; the end-to-end checks (tests/vllm/test_vllm_e2e.py)
and llama.cpp beside vLLM (tests/llamacpp/test_llamacpp_vs_vllm.py) read the same run of
configs/vllm-cpu-tiny.toml. Under pytest-xdist each worker has its own session, so a session fixture alone would
launch it once per worker: the run is made once under the test session's shared temporary root, behind a lock,
and later callers (any worker) read what the first stored. A module name of its own (not conftest), imported
from both test folders (``tests/`` is on sys.path through the root conftest).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from imxtest import ROOT, engine_cli, engine_missing, processes_mentioning

KEY_VAR = "IMX_VLLM_TEST_KEY"
PYTHON_VAR = "INFERMATRIX_VLLM_PYTHON"  # a Python with vllm-cpu installed (.ci/run sets it; docs/vllm.md)
TINY_CONFIG = ROOT / "configs" / "vllm-cpu-tiny.toml"
MODEL_VAR = "INFERMATRIX_TINY_MODEL"  # scripts/setup-engine.sh's tiny model, the one the tiny GGUF was written from


def shared_root(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test session's temporary root as every xdist worker sees it (each worker's own base is one below it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(config, "workerinput") else base


def made_once(root: Path, name: str, make: Callable[[Path], None]) -> Path:
    """``root/name`` filled by ``make`` once for the session: the first caller makes it under an exclusive lock,
    the others wait for the lock and find it done. A ``make`` that raised leaves no done mark: the next caller
    tries again (and fails the same way, saying why, rather than reading half a folder)."""
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            make(folder)
            done.touch()
    return folder


def _tiny_model(vllm_python: str, out: Path) -> None:
    src = Path(os.environ.get(MODEL_VAR) or "~/.cache/infermatrix/tiny-qwen2").expanduser()
    if (src / "tokenizer.json").is_file():
        shutil.copytree(src, out)  # a copy under this session's own name: "no process left" looks for it
        return
    made = subprocess.run([vllm_python, str(ROOT / "scripts" / "make_tiny_model.py"), str(out)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr


def launch_args(vllm_python: str, model_dir: Path, *extra: str) -> list[str]:
    return ["--set", f"engine.python={vllm_python}", "--set", f"engine.model_source={model_dir}",
            "--set", f"engine.api_key_env={KEY_VAR}", *extra]  # fmt: skip


# Short cells, and check_client off: on a shared 2-core machine the client's event loop lags past its 5 ms limit
# beside vLLM, so cells would come out client_bound and llama.cpp's compare would have no cell valid in both.
SHORT = ("--set", "matrix.duration_s=2", "--set", "matrix.check_client=false")


def shared_vllm_run(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory, vllm_python: str) -> dict:
    """``infermatrix run configs/vllm-cpu-tiny.toml`` (launch, prefill, matrix, store, shutdown) once per test
    session: its database, run folders, model, API key, exit and output, how long it took, what it left running."""

    def make(folder: Path) -> None:
        model, db = folder / "model", folder / "run" / "results.duckdb"
        _tiny_model(vllm_python, model)
        db.parent.mkdir()
        key = "imx-" + secrets.token_hex(12)
        overrides = launch_args(vllm_python, model, *SHORT)
        t0 = time.monotonic()
        proc = engine_cli("run", str(TINY_CONFIG), "--db", str(db), *overrides, env={KEY_VAR: key}, timeout=900)
        record = {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr, "seconds": time.monotonic() - t0,
                  "left_running": processes_mentioning(str(model)), "key": key, "overrides": overrides}  # fmt: skip
        (folder / "record.json").write_text(json.dumps(record))

    folder = made_once(shared_root(config, tmp_path_factory), "vllm-tiny-run", make)
    record = json.loads((folder / "record.json").read_text())
    return {**record, "db": folder / "run" / "results.duckdb", "model_dir": folder / "model"}


def checked_vllm_python(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> str:
    """``INFERMATRIX_VLLM_PYTHON``, checked once per test session whichever worker asks first: the file exists and
    imports vllm (~5 s of a core: once, not once per worker). Missing or broken: ``engine_missing`` (a failure under
    CI=true, naming the engine and showing its set-up log; a skip saying why elsewhere)."""
    py = os.environ.get(PYTHON_VAR)
    if not py:
        engine_missing("vllm-cpu", f"vLLM not installed: set {PYTHON_VAR} to a Python with vllm-cpu (.ci/run does; see docs/vllm.md)")
    if not Path(py).is_file():
        engine_missing("vllm-cpu", f"{PYTHON_VAR}={py}: no such file (the vllm-cpu install failed or was removed)")

    def probe(folder: Path) -> None:
        done = subprocess.run([py, "-c", "import vllm, tokenizers; print(vllm.__version__)"], capture_output=True, text=True, timeout=180)
        (folder / "probe.json").write_text(json.dumps({"returncode": done.returncode, "stderr": done.stderr}))

    got = json.loads((made_once(shared_root(config, tmp_path_factory), "vllm-python-probe", probe) / "probe.json").read_text())
    if got["returncode"] != 0:
        engine_missing("vllm-cpu", f"{PYTHON_VAR}={py} cannot import vllm: {got['stderr'].strip().splitlines()[-1:]}")
    return py


@pytest.fixture(scope="session")
def vllm_python(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The checked vLLM Python, as a fixture for every test folder (this module is a plugin of tests/conftest.py)."""
    return checked_vllm_python(request.config, tmp_path_factory)
