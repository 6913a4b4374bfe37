"""Helpers for the sim tests: a server process, an SSE reader, a condition poller."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any, Callable

import httpx
import orjson

import infermatrix.testing as kit

ROOT = Path(__file__).parents[2]


class Server(kit.SimServer):
    """A sim server with the request helpers the sim's own tests use (``Server.start(profile, log)``)."""

    @classmethod
    def start(cls, profile: str, log: Path) -> "Server":
        return kit.launch_sim(profile, log, cwd=ROOT, cls=cls)

    @property
    def url(self) -> str:
        return self.base_url

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return httpx.get(self.url + path, timeout=30, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        return httpx.post(self.url + path, json=body, timeout=60, **kw)

    def request_truth(self, request_id: str) -> dict[str, Any]:
        found = [r for r in self.truth()["requests"] if r["request_id"] == request_id]
        assert len(found) == 1, f"{len(found)} truth records for {request_id}"
        return found[0]


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
