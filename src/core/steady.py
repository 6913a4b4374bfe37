"""The engine's own view of a cell, from its Prometheus ``/metrics``: running, waiting, tokens generated.

Used to open the window only at steady state (N running, 0 waiting) and to reconcile token counts.
Servers without metrics are fine: every read then returns ``None`` and the client's view decides.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
import httpx

from infermatrix.plugins.capacity import metric_value

__all__ = ["EngineGauges", "Gauges", "SteadyState", "parse_gauges"]

_WANTED = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:generation_tokens_total")


@dataclass
class Gauges:
    running: float | None
    waiting: float | None
    generation_tokens: float | None


@dataclass
class SteadyState:
    reached: bool  # N running and none waiting (or the engine has no metrics)
    achieved: float | None  # most requests the engine ran at once while we waited
    waited_s: float
    metrics: bool  # whether the engine reports the gauges at all


def parse_gauges(page: str) -> Gauges:
    """The three values from a Prometheus page, summed over label sets (engines, models)."""
    # A real vLLM /metrics page is ~50 KB; the full Prometheus parse of it takes tens of ms inside the
    # event loop. Keep only the three families' sample lines (a fast prefix scan) and parse those.
    text = "\n".join(line for line in page.splitlines() if line.startswith(_WANTED))
    return Gauges(
        running=metric_value(text, "vllm:num_requests_running"),
        waiting=metric_value(text, "vllm:num_requests_waiting"),
        generation_tokens=metric_value(text, "vllm:generation_tokens_total"),
    )


class EngineGauges:
    def __init__(self, client: httpx.AsyncClient, base_url: str, headers: dict[str, str]):
        self.client, self.url, self.headers = client, f"{base_url}/metrics", headers
        self.available = True

    async def read(self) -> Gauges | None:
        if not self.available:
            return None
        try:
            r = await self.client.get(self.url, headers=self.headers, timeout=5)
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            self.available = False  # no metrics endpoint: stop asking
            return None
        g = parse_gauges(r.text)
        if g.running is None and g.waiting is None and g.generation_tokens is None:
            self.available = False
            return None
        return g

    async def wait_steady(self, n: int, timeout_s: float) -> SteadyState:
        """Wait until the engine runs ``n`` requests with none waiting, at most ``timeout_s``."""
        t0 = time.monotonic()
        best: float | None = None
        while True:
            g = await self.read()
            if g is None or g.running is None:
                return SteadyState(reached=True, achieved=best, waited_s=time.monotonic() - t0, metrics=False)
            best = g.running if best is None else max(best, g.running)
            if g.running >= n and not g.waiting:
                return SteadyState(reached=True, achieved=g.running, waited_s=time.monotonic() - t0, metrics=True)
            if time.monotonic() - t0 >= timeout_s:
                return SteadyState(reached=False, achieved=best, waited_s=time.monotonic() - t0, metrics=True)
            await anyio.sleep(0.02)
