#!/usr/bin/env python3
"""How fast the client reads streams, how late it stamps them, and how much of a matrix is overhead.

    .venv/bin/python scripts/bench_client.py                       # readers x 1/32/128/512 streams, workers, ~2 min
    .venv/bin/python scripts/bench_client.py --streams 128 --seconds 3 --matrix   # + a full sim matrix's overhead
    .venv/bin/python scripts/bench_client.py --matrix --matrix-only                # just the matrix (~75 s)

Against ``scripts/bench_sse_server.py`` (a near-free SSE server in its own process, on loopback), for
each number of streams and each reader — infermatrix over httpx, infermatrix over the raw asyncio
transport, and a bare asyncio baseline (split + orjson, no bookkeeping) — in the same run:

- **flood**: the server writes as fast as the socket takes (16 chunks a write): events read per
  CPU-second of this process, and the ratio to the baseline;
- **paced**: one chunk per stream every 10 ms (N = 512: every 40 ms, the same total), each carrying the
  server's ``time.monotonic_ns()`` when written: the client's stamp minus the server's, p50 / p99;
- **workers**: 128 flood streams through 1 … cores worker processes: events per wall second;
- ``--matrix``: a sim matrix through the real command line: its wall time by phase group as the run
  stored it (``runs.phase_seconds``) and the harness overhead — the share outside measurement (decode
  windows, prefill probes) and warm-up (warm-ups, ramps, steady-state waits); docs/metrics.md.
  ``--matrix-only`` skips the reader figures.

Speed numbers live here, not in tests. Method and results: docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import orjson

from infermatrix.core.stream.client import encode_body, stream_request
from infermatrix.core.stream.transport import RawClient
from infermatrix.core.distributed.workers import WorkerPool, WorkerSpec, usable_cores
from infermatrix.core.types import RequestRecord

ROOT = Path(__file__).resolve().parents[1]
START_BOUND_S = 60  # the workers table waits at most this long for its 128 streams' first tokens
BODY = {"model": "bench", "prompt": "x", "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, mode: str, rate: float = 100.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1/completions"
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "bench_sse_server.py"), "--port", str(self.port),
                                      "--mode", mode, "--rate", str(rate)], stdout=subprocess.PIPE)  # fmt: skip
        assert self.proc.stdout is not None
        self.proc.stdout.readline()  # "ready"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


# --- the baseline: a bare asyncio reader ------------------------------------------------------------------


class _Bare(asyncio.Protocol):
    def __init__(self, done: asyncio.Future[None], lags: list[float] | None) -> None:
        self.done, self.lags, self.buf, self.events = done, lags, b"", 0

    def data_received(self, data: bytes) -> None:
        t = time.monotonic_ns()
        parts = (self.buf + data).split(b"\n\n")
        self.buf = parts.pop()
        for p in parts:
            i = p.find(b"data: ")
            if i < 0:
                continue
            payload = p[i + 6 :]
            if payload == b"[DONE]":
                if not self.done.done():
                    self.done.set_result(None)
                continue
            obj = orjson.loads(payload)
            if obj["choices"]:
                self.events += 1
                if self.lags is not None:
                    self.lags.append((t - int(obj["choices"][0]["text"])) / 1e6)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def bare_stream(url: str, body: bytes, lags: list[float] | None) -> int:
    """One request on a fresh connection (closed after [DONE]); returns the events read."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    port = int(url.split(":")[2].split("/")[0])
    tr, proto = await loop.create_connection(lambda: _Bare(done, lags), "127.0.0.1", port)
    tr.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    try:
        await done
    finally:
        tr.close()
    return proto.events


# --- one measurement --------------------------------------------------------------------------------------


async def measure(reader: str, url: str, n: int, seconds: float, max_tokens: int, lags: list[float] | None) -> tuple[int, float, float]:
    """(events, CPU seconds, wall seconds) of ``n`` closed-loop streams for ``seconds``."""
    body = encode_body({**BODY, "max_tokens": max_tokens})
    stop = time.monotonic() + seconds
    events = 0
    client: httpx.AsyncClient | RawClient | None = None
    if reader == "httpx":
        client = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))
    elif reader == "raw":
        client = RawClient()

    async def one() -> None:
        nonlocal events
        while time.monotonic() < stop:
            if client is None:
                got = await bare_stream(url, body, lags)  # not `events += await …`: that reads events before the await
                events += got
                continue
            rec = await stream_request(client, url, body, RequestRecord(0, 0, 0.0))
            events += len(rec.events)
            if lags is not None:
                lags.extend((t - int(s) / 1e9) * 1000 for (t, _), s in zip(rec.events, rec.text.split()))

    c0, w0 = time.process_time(), time.monotonic()
    await asyncio.gather(*(one() for _ in range(n)))
    cpu, wall = time.process_time() - c0, time.monotonic() - w0
    if client is not None:
        await client.aclose()
    return events, cpu, wall


def readers_table(streams: list[int], seconds: float) -> dict:
    out: dict = {"flood": {}, "paced": {}}
    print("\nflood (server never the bottleneck): events per client CPU-second")
    print(f"{'N':>5} {'httpx':>10} {'raw':>10} {'baseline':>10} {'httpx/base':>11} {'raw/base':>9}")
    srv = Server("flood")
    try:
        for n in streams:
            row = {}
            for reader in ("httpx", "raw", "bare"):
                ev, cpu, wall = asyncio.run(measure(reader, srv.url, n, seconds, 2000, None))
                row[reader] = ev / cpu if cpu > 0 else float("nan")
            out["flood"][n] = row
            print(f"{n:>5} {row['httpx']:>10,.0f} {row['raw']:>10,.0f} {row['bare']:>10,.0f} {row['httpx'] / row['bare']:>11.2f} {row['raw'] / row['bare']:>9.2f}")
    finally:
        srv.stop()
    print("\npaced (the server stamps each chunk): client stamp − server stamp, ms, p50 / p99")
    print(f"{'N':>5} {'ev/s':>7} {'httpx':>15} {'raw':>15} {'baseline':>15}")
    for n in streams:
        rate = 100.0 if n <= 128 else 100.0 * 128 / n
        srv = Server("paced", rate)
        try:
            row = {}
            for reader in ("httpx", "raw", "bare"):
                lags: list[float] = []
                asyncio.run(measure(reader, srv.url, n, seconds, max(20, int(rate * 2)), lags))
                row[reader] = (pct(lags, 50), pct(lags, 99))
            out["paced"][n] = {"rate_per_stream": rate, **row}
            cells = " ".join(f"{a:>6.2f} / {b:>6.2f}" for a, b in row.values())
            print(f"{n:>5} {n * rate:>7,.0f} {cells}")
        finally:
            srv.stop()
    return out


async def _pool(url: str, n: int, k: int, seconds: float, transport: str) -> tuple[int, float]:
    body = encode_body({**BODY, "max_tokens": 2000})
    spec = WorkerSpec(url=url, transport=transport, connect_timeout_s=10, idle_timeout_s=60, streams={i: body for i in range(n)},
                      headers={i: {} for i in range(n)}, keep_text=False)  # fmt: skip
    records: list[RequestRecord] = []
    pool = WorkerPool(spec, k, records)
    task = asyncio.ensure_future(pool.run())
    # Every stream started, or gave up (dead), or a bound: a stream whose requests keep failing, or a worker that
    # died, must not hang the benchmark (CI once waited here 240 s); what went wrong is printed, not swallowed.
    deadline = time.monotonic() + START_BOUND_S
    while len(pool.started) + len(pool.dead) < n and not task.done() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    if len(pool.started) < n:
        failed = Counter(f"{r.outcome}: {(r.error or '')[:80]}" for r in records if r.outcome not in ("ok", "cancelled"))
        print(f"  note: {len(pool.started)} of {n} streams started ({len(pool.dead)} gave up; workers exited: "
              f"{[p.returncode for p in pool.procs]}); failed requests: {dict(failed) or 'none'}", flush=True)  # fmt: skip
    t0 = time.monotonic()
    await asyncio.sleep(seconds)
    t1 = time.monotonic()
    await pool.stop(t1, 0.0)  # no first-token wait: only the events counted above matter here
    await task
    return sum(1 for r in records for t, _ in r.events if t0 <= t <= t1), t1 - t0


def workers_table(seconds: float, transport: str) -> dict:
    print(f"\nworkers ({transport}, 128 flood streams): events per wall second, scaling vs 1 worker")
    srv = Server("flood")
    out = {}
    try:
        for k in range(1, max(2, usable_cores()) + 1):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            ev, wall = asyncio.run(_pool(srv.url, 128, k, seconds, transport))
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
            out[k] = ev / wall
            print(f"  {k} worker(s): {ev / wall:>10,.0f} ev/s   x{out[k] / out[1]:.2f}   ({cpu:.1f} CPU-s in workers)")
    finally:
        srv.stop()
    return out


def matrix_overhead(config: str) -> dict:
    """Run a sim matrix through the CLI; its wall time by phase group, as the run stored it (runs.phase_seconds),
    and the share outside measurement and warm-up (one definition: core/wallclock.py, docs/metrics.md)."""
    import duckdb

    from infermatrix.core.wallclock import wall_split

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "m.duckdb"
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "infermatrix", "run", config, "--db", str(db)], capture_output=True, text=True)
        process_s = time.monotonic() - t0
        if proc.returncode != 0:
            print(proc.stderr[-2000:])
            return {}
        con = duckdb.connect(str(db), read_only=True)
        stored, cells = con.execute("SELECT phase_seconds, (SELECT count(*) FROM cells WHERE measured_s IS NOT NULL) FROM runs").fetchone()
        con.close()
    phases = json.loads(stored) if isinstance(stored, str) else stored
    split = wall_split(phases)
    if split is None:
        print(f"\nmatrix {config}: the run stored no phase_seconds")
        return {}
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nmatrix {config}: {cells} measured cells; run wall {split.wall_s:.1f} s (the process: {process_s:.1f} s); load average {load}")
    print("  " + "  ".join(f"{g} {v:.2f}" for g, v in phases.items()))
    print(f"  {split.line()}")
    print(f"  harness overhead: {100 * split.overhead_share:.1f} % of the run's wall time outside measurement and warm-up")
    return {"phase_seconds": phases, "wall_s": split.wall_s, "measurement_s": split.measurement_s, "warmup_s": split.warmup_s,
            "overhead_s": split.overhead_s, "overhead_share": split.overhead_share, "process_s": process_s, "cells": cells,
            "loadavg": os.getloadavg()}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", default="1,32,128,512")
    ap.add_argument("--seconds", type=float, default=3.0, help="per reader and N")
    ap.add_argument("--matrix", nargs="?", const=str(ROOT / "configs" / "demo-sim.toml"), default=None, help="also run this matrix config")
    ap.add_argument("--matrix-only", action="store_true", help="only the matrix (with --matrix): no reader or worker figures")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    streams = [int(s) for s in args.streams.split(",")]
    figures: dict = {}
    if not (args.matrix_only and args.matrix):
        print(f"bench_client: {usable_cores()} usable cores; server: scripts/bench_sse_server.py on loopback")
        figures = {"readers": readers_table(streams, args.seconds), "workers_httpx": workers_table(args.seconds, "httpx"),
                   "workers_raw": workers_table(args.seconds, "raw")}  # fmt: skip
    if args.matrix:
        figures["matrix"] = matrix_overhead(args.matrix)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
