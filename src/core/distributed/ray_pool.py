"""A cell's streams on Ray actors spread over hosts (``[client] backend = "ray"``; docs/distributed.md).

The only module that imports Ray (lazily: ``pip install 'infermatrix[ray]'``). Same interface as
workers.WorkerPool (``run``, ``stop``, ``started``, ``dead``, ``loads``, ``ticks``, ``records``), so the cell
runner treats both alike. Per cell: K actors (stream ``i`` to actor ``i mod K``), placed with Ray's SPREAD
strategy; each actor's clock measured by ping exchanges before the streams start and after they stop
(clocks.py: min-RTT offset ± RTT/2, a drift line through every estimate of that host in the run); window
bounds sent in the host's clock; every record converted to the coordinator's clock with the fitted model.
The coordinator only starts, polls (every 50 ms, off the streams' path) and stops.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import time
from typing import Any, Callable

import anyio

from infermatrix.core.config import ConfigError
from infermatrix.core.distributed.clocks import ClockModel, Exchange, OffsetEstimate, estimate_offset, fit_clock
from infermatrix.core.distributed.hostclock import convert_record, convert_ticks, drift_uncertainty_ppm, skews_from_env, window_bound
from infermatrix.core.stream.loop_lag import ClientLoad
from infermatrix.core.distributed.workers import WorkerSpec, split_spec, stream_event
from infermatrix.core.types import RequestRecord

__all__ = ["RayPool", "RayUnavailable", "HostClock", "ray_module"]

POLL_S = 0.05


class RayUnavailable(ConfigError):
    """``backend = "ray"`` without Ray installed, or no cluster at the address: one line, the run stops."""


def ray_module(address: str | None) -> Any:
    """Ray, initialised (attached to ``address``, or a local Ray started/attached when None)."""
    try:
        import ray
    except ImportError:
        raise RayUnavailable("[client] backend = \"ray\" needs Ray: pip install 'infermatrix[ray]'") from None
    if not ray.is_initialized():
        _check_reachable(address)  # ray.init retries an unreachable GCS for minutes: say so in seconds instead
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise RayUnavailable(f"cannot reach Ray at {address or 'a local cluster'}: {str(exc).splitlines()[0]}") from None
    return ray


def _check_reachable(address: str | None, timeout_s: float = 5.0) -> None:
    """A ``host:port`` (or ``ray://host:port``) address must accept a TCP connection; "auto" and None are Ray's to find."""
    if not address or address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailable(f"client.ray_address {address!r}: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise RayUnavailable(f"cannot reach Ray at {address}: {exc.strerror or exc}; is the cluster running (ray start --head)?") from None


@dataclasses.dataclass
class HostClock:
    """One actor's host and its clock, as measured this cell (and earlier cells of the run on the same node)."""

    actor: int
    node_id: str
    hostname: str
    streams: int
    estimates: list[OffsetEstimate]
    model: ClockModel
    injected: dict[str, float] | None = None  # the test knob's skew, when set (docs/distributed.md)

    @property
    def name(self) -> str:
        return f"{self.hostname}/{self.node_id[:8]}#a{self.actor}"


class RayPool:
    def __init__(self, spec: WorkerSpec, k: int, records: list[RequestRecord], on_tokens: Callable[[int], None] | None, client: Any,
                 history: dict[str, list[OffsetEstimate]]):  # fmt: skip
        self.specs = split_spec(spec, k)
        self.records, self.on_tokens, self.client, self.history = records, on_tokens, client, history
        self.started: set[int] = set()
        self.dead: set[int] = set()
        self.loads: list[ClientLoad] = []
        self.ticks: list[tuple[float, float]] = []
        self.host_loads: dict[int, ClientLoad] = {}
        self.host_ticks: dict[int, list[tuple[float, float]]] = {}
        self.hosts: list[HostClock] = []
        self.failures: list[str] = []
        self._raw: list[tuple[int, RequestRecord, RequestRecord]] = []  # (actor, as the host stamped it, as converted)
        self._bye: set[int] = set()
        self._actors: list[Any] = []
        self._ray: Any = None

    async def open(self) -> None:
        """Create the actors (spread over the nodes) and measure their clocks. Blocking Ray calls run in a thread."""
        self._ray = ray = await anyio.to_thread.run_sync(ray_module, self.client.ray_address)
        from infermatrix.core.distributed.ray_actor import ClientActor

        remote = ray.remote(ClientActor)
        skews = skews_from_env()
        strategy = "SPREAD" if self.client.placement == "spread" else "DEFAULT"
        for w, spec in enumerate(self.specs):
            opts = remote.options(num_cpus=self.client.actor_cpus, scheduling_strategy=strategy, max_concurrency=1000)
            self._actors.append(opts.remote(spec, skews.get(w)))
        for w, actor in enumerate(self._actors):
            where = await actor.where.remote()
            estimates = self.history.setdefault(f"{where['node_id']}#a{w}", [])
            estimates.append(await self._estimate(actor))
            self.hosts.append(HostClock(w, where["node_id"], where["hostname"], len(self.specs[w].streams), estimates,
                                        fit_clock(estimates), where["skew"]))  # fmt: skip

    async def _estimate(self, actor: Any) -> OffsetEstimate:
        exchanges = []
        for _ in range(self.client.clock_pings):
            t0 = time.monotonic()
            worker = await actor.ping.remote()
            exchanges.append(Exchange(t0, worker, time.monotonic()))
        return estimate_offset(exchanges)

    async def run(self) -> None:
        """Start every actor's streams, then poll them until each has said goodbye."""
        for actor in self._actors:
            await actor.start.remote()
        while len(self._bye) < len(self._actors):
            for w, actor in enumerate(self._actors):
                if w not in self._bye:
                    for kind, value in await actor.poll.remote():
                        self._take(w, kind, value)
            await anyio.sleep(POLL_S)

    def _take(self, w: int, kind: str, value: Any) -> None:
        host = self.hosts[w]
        if stream_event(kind, value, self.started, self.dead, self.on_tokens):
            return
        if kind == "record":
            rec = dataclasses.replace(value, events=list(value.events))
            convert_record(rec, host.model.to_coordinator)
            self._raw.append((w, value, rec))
            self.records.append(rec)
        elif kind == "load":
            self.host_loads[w] = value[0]
            self.host_ticks[w] = value[1]
        elif kind in ("bye", "failed"):
            if kind == "failed":
                self.failures.append(f"actor {host.name}: {value}")
            self._bye.add(w)

    async def stop(self, window_end: float, first_token_wait_s: float) -> None:
        """Stop every actor at the window's end (sent in its host's clock), collect the rest, measure the clocks
        again, and re-convert every record and tick with the model fitted through both measurements."""
        with anyio.CancelScope(shield=True):
            for host, actor in zip(self.hosts, self._actors):
                await actor.stop.remote(window_bound(host.model, window_end), first_token_wait_s)
            with anyio.move_on_after(first_token_wait_s + 30):
                while len(self._bye) < len(self._actors):
                    await anyio.sleep(POLL_S)
            for host, actor in zip(self.hosts, self._actors):
                host.estimates.append(await self._estimate(actor))
                host.model = fit_clock(host.estimates)
            self._reconvert()
            for actor in self._actors:
                self._ray.kill(actor)

    def _reconvert(self) -> None:
        for w, raw, rec in self._raw:
            again = dataclasses.replace(raw, events=list(raw.events))
            convert_record(again, self.hosts[w].model.to_coordinator)
            rec.sent, rec.first_token, rec.ended, rec.opened, rec.events = again.sent, again.first_token, again.ended, again.opened, again.events
            rec.first_content = again.first_content
        self.loads = [self.host_loads[w] for w in sorted(self.host_loads)]
        for w, ticks in self.host_ticks.items():
            self.host_ticks[w] = convert_ticks(ticks, self.hosts[w].model.to_coordinator)
        # Each host's ticks judge its own stamps (measure/hosts.py); mixed, one host's stall would be charged to another's.
        self.ticks = []

    def host_flags(self) -> list[dict[str, Any]]:
        """Per host: where, how many streams, its clock (offset at the last estimate, uncertainty, drift)."""
        out = []
        for h in self.hosts:
            last = h.estimates[-1]
            out.append({
                "host": h.name, "actor": h.actor, "node_id": h.node_id, "hostname": h.hostname, "streams": h.streams,
                "offset_ms": h.model.offset_at(last.at) * 1000, "uncertainty_ms": h.model.uncertainty * 1000,
                "drift_ppm": h.model.drift_ppm, "drift_uncertainty_ppm": drift_uncertainty_ppm(h.estimates),
                "rtt_min_ms": min(e.rtt for e in h.estimates) * 1000, "clock_estimates": len(h.estimates),
                "estimates": [{"at": e.at, "offset_ms": e.offset * 1000, "uncertainty_ms": e.uncertainty * 1000} for e in h.estimates],
                "injected": h.injected,
            })  # fmt: skip
        return out
