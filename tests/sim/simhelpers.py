"""Helpers for the sim tests: a server process, an SSE reader, a condition poller."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import httpx
import orjson

ROOT = Path(__file__).parents[2]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, profile: str, log: Path):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        argv = [sys.executable, "-m", "infermatrix.plugins.sim.server", "--profile", profile, "--port", str(self.port)]
        self.proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, cwd=ROOT)  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"sim server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return httpx.get(self.url + path, timeout=30, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        return httpx.post(self.url + path, json=body, timeout=60, **kw)

    def truth(self, since: float | None = None) -> dict[str, Any]:
        return self.get("/debug/truth", params={"since": since} if since is not None else None).json()

    def request_truth(self, request_id: str) -> dict[str, Any]:
        found = [r for r in self.truth()["requests"] if r["request_id"] == request_id]
        assert len(found) == 1, f"{len(found)} truth records for {request_id}"
        return found[0]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def new_id() -> str:
    return uuid.uuid4().hex[:12]


def sse(server: Server, path: str, body: dict[str, Any], request_id: str | None = None) -> list[tuple[float, Any]]:
    """Stream a request; ``(arrival, parsed event)`` per SSE data line, ``"[DONE]"`` for the end marker."""
    headers = {"X-Request-Id": request_id} if request_id else {}
    events: list[tuple[float, Any]] = []
    with httpx.stream("POST", server.url + path, json={**body, "stream": True}, headers=headers, timeout=60) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            events.append((time.monotonic(), "[DONE]" if data == "[DONE]" else orjson.loads(data)))
    return events


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    """Poll until ``predicate()`` is truthy (a condition, never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


STREAM_USAGE = {"include_usage": True, "continuous_usage_stats": True}
