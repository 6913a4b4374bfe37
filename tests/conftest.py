"""Shared fixtures. The session fails if any test leaves a child process (engine, sim, worker) behind."""

from __future__ import annotations

import psutil
import pytest
from imxtest import SimServer


@pytest.fixture
def anyio_backend():
    return "asyncio"


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
