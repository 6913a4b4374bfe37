"""Shared fixtures. The session fails if any test leaves a child process (engine, sim, worker) behind."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
from pathlib import Path

import psutil
import pytest
from imxtest import SimServer

pytest_plugins = ["solo", "vllm_run_once"]  # @pytest.mark.solo (tests/solo.py); the vllm_python fixture (tests/vllm_run_once.py)


def pytest_configure(config: pytest.Config) -> None:
    """Let the suite's processes keep the bytecode they compile, whatever ``PYTHONDONTWRITEBYTECODE`` says (this
    machine's image sets it). The suite starts hundreds of Python processes — the CLI, sim servers, client workers,
    Ray actors, the xdist workers themselves — and under that variable each one compiled the project's 240 modules
    from source again (0.4-0.5 s of CPU per CLI run; each worker's collection 8.5 s instead of 2.2 s). Cleared here,
    in the controller before xdist starts its workers, so they and everything they start write ``__pycache__``
    (gitignored) once and read it after: Python's own default. docs/performance.md, "Where the 26 minutes go"."""
    if not hasattr(config, "workerinput"):
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="session")
def sample_traces(tmp_path_factory):
    """``write(requests, seed=1)`` -> a folder with the repo's sample traces (mooncake.jsonl, azure.csv, burstgpt.csv),
    written once per (requests, seed) by scripts/make_sample_traces.py loaded as a module (the fast loop starts no
    process)."""
    spec = importlib.util.spec_from_file_location("make_sample_traces", Path(__file__).resolve().parents[1] / "scripts" / "make_sample_traces.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    made: dict[tuple[int, int], Path] = {}

    def write(requests: int, seed: int = 1) -> Path:
        if (requests, seed) not in made:
            out = tmp_path_factory.mktemp("traces")
            assert [p.name for p in script.write(out, requests, seed)] == ["mooncake.jsonl", "azure.csv", "burstgpt.csv"]
            made[(requests, seed)] = out
        return made[(requests, seed)]

    return write


@pytest.fixture(scope="session", autouse=True)
def no_orphan_processes():
    yield
    children = psutil.Process().children(recursive=True)
    _, alive = psutil.wait_procs(children, timeout=10)
    leftover = [f"{p.pid} {' '.join(p.cmdline()[:6])}" for p in alive if p.is_running()]
    for p in alive:
        p.kill()
    assert not leftover, f"processes left running after the test session: {leftover}"


@pytest.fixture
def sim_factory(tmp_path):
    servers: list[SimServer] = []

    def start(profile: str = "tiny") -> SimServer:
        s = SimServer(profile, tmp_path / f"sim-{len(servers)}.log")
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


# ---- the fast loop: `pytest -m "not slow"` starts no process --------------------------------------
# Starting a Python process (the CLI, a sim server) costs a second or more on a loaded 2-core machine;
# such tests are `slow`. Tests using these fixtures are marked slow here; any other test that starts
# a process without the mark fails, saying so (so the fast loop stays fast as tests are added).
PROCESS_FIXTURES = {"sim_server", "tiny", "sim_factory", "sim_run_db", "sim_db", "vllm_server", "ray_cluster"}
SLOW_HINT = "this test starts a process ({}): mark it @pytest.mark.slow (the fast loop, pytest -m 'not slow', starts none)"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@contextlib.contextmanager
def _no_process_unless_slow(item):
    if item.get_closest_marker("slow") is not None:
        yield
        return
    original = subprocess.Popen.__init__

    def refuse(self, args, *a, **kw):
        raise AssertionError(SLOW_HINT.format(" ".join(map(str, args))[:120] if isinstance(args, (list, tuple)) else args))

    subprocess.Popen.__init__ = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original  # type: ignore[method-assign]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    with _no_process_unless_slow(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with _no_process_unless_slow(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    with _no_process_unless_slow(item):
        yield
