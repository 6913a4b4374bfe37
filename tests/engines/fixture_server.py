"""A real HTTP server on a loopback port that answers what a recorded engine answered.

A fixture file (``fixtures/*.json``) names its source and maps ``"METHOD /path"`` to a response:
``{"status": 200, "json": ...}`` (the value is sent JSON-encoded) or ``{"text": "..."}``. Anything else
is a 404, as a server without that endpoint answers. Served by uvicorn in a thread of the test
process; requests that came in (method, path, JSON body) are kept for the test to check.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

FIXTURES = Path(__file__).parent / "fixtures"


def load_fixture(name: str) -> dict[str, Any]:
    data = json.loads((FIXTURES / name).read_text())
    assert data.get("source"), f"{name} does not name its source"
    return data


class FixtureServer:
    def __init__(self, fixture: str | dict[str, Any]):
        # A file name under fixtures/, or the fixture itself (a test's own made-up server, saying so in its source).
        self.fixture = load_fixture(fixture) if isinstance(fixture, str) else fixture
        self.routes: dict[str, dict[str, Any]] = self.fixture["routes"]
        self.requests: list[tuple[str, str, Any]] = []
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        app = Starlette(routes=[Route("/{path:path}", self._answer, methods=["GET", "POST"])])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        self._wait_started()

    def _wait_started(self) -> None:
        # uvicorn sets `started` once it listens; wait on the thread (bounded), not on a fixed sleep.
        deadline = time.monotonic() + 30
        while not self.server.started:
            self.thread.join(0.02)
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("fixture server did not start")

    async def _answer(self, request: Request) -> Response:
        body: Any = None
        if request.method == "POST":
            raw = await request.body()
            body = json.loads(raw) if raw else None
        self.requests.append((request.method, request.url.path, body))
        spec = self.routes.get(f"{request.method} {request.url.path}")
        if spec is None:
            return PlainTextResponse("Not Found", status_code=404)
        status = int(spec.get("status", 200))
        if "json" in spec:
            return JSONResponse(spec["json"], status_code=status)
        return PlainTextResponse(spec.get("text", ""), status_code=status)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def __enter__(self) -> FixtureServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
