"""Sim servers as real processes on loopback ports, started from the server module directly.

Servers are shared per profile within the session (each start costs about a second); tests that
look at ground truth find their own requests by ``X-Request-Id``, so sharing doesn't mix them up.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest
from simhelpers import Server


@pytest.fixture(scope="session")
def sim_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``sim_server(ref)``: a running server for a profile name or dict (dicts may use ``base``)."""
    servers: dict[str, Server] = {}
    root = tmp_path_factory.mktemp("sim")

    def start(profile: str | dict[str, Any] = "tiny") -> Server:
        key = profile if isinstance(profile, str) else json.dumps(profile, sort_keys=True)
        if key not in servers:
            ref = profile
            if isinstance(profile, dict):
                path = root / f"profile-{len(servers)}.json"
                path.write_text(json.dumps(profile))
                ref = str(path)
            servers[key] = Server.start(str(ref), root / f"server-{len(servers)}.log")
        return servers[key]

    yield start
    for s in servers.values():
        s.stop()


@pytest.fixture
def tiny(sim_server: Callable[..., Server]) -> Server:
    return sim_server("tiny")
