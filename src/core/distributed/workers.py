"""Closed-loop streams, in this process or spread over worker processes.

One Python process reads a bounded number of chunks per CPU-second (docs/performance.md). Above
``matrix.client_workers_above`` streams a cell's streams are spread over worker processes, each with
its own event loop and connection pool, stream ``i`` to worker ``i mod K``. A worker sends the parent
a message when a stream gets its first token (the ramp waits for every stream) and every request's
:class:`RequestRecord` when it ends; the parent puts them in the same list the in-process streams
fill, so every number downstream is computed the same way. Times are ``time.monotonic()``, one clock
for all processes of a host. The parent says ``stop`` when the window closes: the worker cancels its
streams (the server aborts them), sends the cut-short records and its own loop-lag reading, and exits.

The protocol is length-prefixed pickles over the worker's stdin/stdout (parent and worker are the
same program; nothing else speaks it).
"""

from __future__ import annotations

import math
import os
import pickle
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import anyio
import httpx
from anyio.abc import ByteReceiveStream, Process

from infermatrix.core.stream.client import stream_request
from infermatrix.core.stream.loop_lag import ClientLoad, ClientMonitor
from infermatrix.core.types import RequestRecord

__all__ = ["MAX_CONSECUTIVE_FAILURES", "run_stream", "worker_count", "worker_loop", "split_spec", "stream_event", "WorkerSpec", "WorkerPool"]

# A stream that fails this many times in a row stops; the cell is then an error, not a hang.
MAX_CONSECUTIVE_FAILURES = 3
_LEN = struct.Struct("!I")


async def run_stream(
    i: int, send: Callable[[RequestRecord], Awaitable[RequestRecord]], on_record: Callable[[RequestRecord], None],
    keep_going: Callable[[], bool] = lambda: True,
) -> bool:
    """Stream ``i``'s closed loop: send, and when a request ends send the next at once (until
    ``keep_going`` says no: the window closed); ``on_record`` gets each record as it starts (so a
    cut-short cell still has it). Returns False when the stream died after
    :data:`MAX_CONSECUTIVE_FAILURES` failures in a row."""
    failures = 0
    seq = 0
    while keep_going():
        rec = RequestRecord(stream_index=i, seq=seq, sent=time.monotonic())
        on_record(rec)
        await send(rec)
        seq += 1
        if rec.outcome == "ok":
            failures = 0
            continue  # closed loop: restart at once with the same, already cached prompt
        failures += 1
        if failures >= MAX_CONSECUTIVE_FAILURES:
            return False
        await anyio.sleep(0.2)
    return True


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def worker_count(n: int, above: int, configured: int) -> int:
    """Worker processes for a cell of ``n`` streams: none (0) up to ``above`` streams, else the
    configured number, or one per ``above`` streams up to the usable cores (at least 2)."""
    if n <= above:
        return 0
    k = configured if configured > 0 else min(usable_cores(), max(2, math.ceil(n / above)))
    return k if k >= 2 else 0


@dataclass
class WorkerSpec:
    """Everything a worker needs; pickled to its stdin."""

    url: str
    transport: str  # httpx | raw
    connect_timeout_s: float
    idle_timeout_s: float
    streams: dict[int, bytes]  # stream index -> encoded request body
    headers: dict[int, dict[str, str]]  # stream index -> headers (X-Request-Id carries {seq}, filled per request)
    keep_text: bool = True
    id_template: dict[int, str] = field(default_factory=dict)  # stream index -> request id with "{seq}"
    count_path: tuple[str, ...] = ()  # where a chunk's cumulative token count is (EngineTraits.per_chunk_usage_path)
    first: dict[int, bytes] = field(default_factory=dict)  # stream index -> its shortened first request (measure/stagger.py)


def _frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _LEN.pack(len(data)) + data


async def _read_frame(stream: ByteReceiveStream, buf: bytearray) -> Any:
    while len(buf) < 4 or len(buf) < 4 + _LEN.unpack_from(buf)[0]:
        buf.extend(await stream.receive())
    (size,) = _LEN.unpack_from(buf)
    obj = pickle.loads(bytes(buf[4 : 4 + size]))
    del buf[: 4 + size]
    return obj


def split_spec(spec: WorkerSpec, k: int) -> list[WorkerSpec]:
    """Stream ``i`` to worker ``i mod k``."""

    def mine(d: dict[int, Any], w: int) -> dict[int, Any]:
        return {i: v for i, v in d.items() if i % k == w}

    return [WorkerSpec(spec.url, spec.transport, spec.connect_timeout_s, spec.idle_timeout_s, mine(spec.streams, w),
                       mine(spec.headers, w), spec.keep_text, mine(spec.id_template, w), spec.count_path,
                       mine(spec.first, w)) for w in range(k)]  # fmt: skip


def stream_event(kind: str, value: Any, started: set[int], dead: set[int], on_tokens: Callable[[int], None] | None) -> bool:
    """A worker's stream message that every pool (processes, Ray actors) takes alike: a stream's first token
    (``started``), a stream that gave up (``dead``), tokens read (``tokens``, for the progress line). False for the
    rest (records, loads, goodbyes), which each pool takes its own way."""
    if kind == "started":
        started.add(value)
    elif kind == "dead":
        dead.add(value)
    elif kind == "tokens":
        if on_tokens is not None:
            on_tokens(value)
    else:
        return False
    return True


class WorkerPool:
    """The parent's side: start K workers, collect their records into ``records``, stop them."""

    def __init__(self, spec: WorkerSpec, k: int, records: list[RequestRecord], on_tokens: Callable[[int], None] | None = None):
        self.specs = split_spec(spec, k)
        self.records = records
        self.on_tokens = on_tokens
        self.started: set[int] = set()
        self.dead: set[int] = set()
        self.loads: list[ClientLoad] = []
        self.ticks: list[tuple[float, float]] = []  # every worker's loop-lag ticks (for the lag at the window's edges)
        self.procs: list[Process] = []
        self._done = anyio.Event()
        self._finished = 0

    async def run(self) -> None:
        """Start the workers and read from them until each has said goodbye (or died)."""
        async with anyio.create_task_group() as tg:
            for spec in self.specs:
                if not spec.streams:
                    self._finished += 1
                    continue
                proc = await anyio.open_process([sys.executable, "-m", "infermatrix.core.distributed.workers"], stderr=None)
                self.procs.append(proc)
                assert proc.stdin is not None
                await proc.stdin.send(_frame(spec))
                tg.start_soon(self._read, proc)

    async def _read(self, proc: Process) -> None:
        assert proc.stdout is not None
        buf = bytearray()
        try:
            while True:
                kind, value = await _read_frame(proc.stdout, buf)
                if stream_event(kind, value, self.started, self.dead, self.on_tokens):
                    continue
                if kind == "record":
                    self.records.append(value)
                elif kind == "load":
                    load, ticks = value
                    self.loads.append(load)
                    self.ticks.extend(ticks)
                elif kind == "bye":
                    break
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            pass  # a worker that died: its streams are missing from the records, and the cell says so
        finally:
            await proc.wait()

    async def stop(self, window_end: float, first_token_wait_s: float) -> None:
        """The window closed: every worker starts no new request, gives requests sent before
        ``window_end`` up to ``first_token_wait_s`` for their first token (as the in-process path does),
        cancels its streams and reports; waited for, then killed."""
        with anyio.CancelScope(shield=True):
            for proc in self.procs:
                try:
                    assert proc.stdin is not None
                    await proc.stdin.send(_frame(("stop", window_end, first_token_wait_s)))
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass
            with anyio.move_on_after(first_token_wait_s + 30):
                for proc in self.procs:
                    await proc.wait()
            for proc in self.procs:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()


# --- the worker process ----------------------------------------------------------------------------------


async def worker_loop(spec: WorkerSpec, send: Callable[[Any], None], flush: Callable[[], None],
                      control: Callable[[], Awaitable[Any]]) -> None:
    """The worker's streams, wherever the worker lives (a subprocess here, a Ray actor in distributed/ray_pool.py):
    ``send`` queues one message for the parent, ``flush`` pushes the queued ones out (every 50 ms), ``control``
    returns the parent's next message (``("stop", window_end, wait_s)``), or None when the parent went away."""
    from infermatrix.core.stream.transport import RawClient

    tokens = 0

    def on_tokens(k: int) -> None:
        nonlocal tokens
        tokens += k

    if spec.transport == "raw":
        client: Any = RawClient(connect_timeout_s=spec.connect_timeout_s, idle_timeout_s=spec.idle_timeout_s)
    else:
        client = httpx.AsyncClient(timeout=httpx.Timeout(connect=spec.connect_timeout_s, read=spec.idle_timeout_s, write=30, pool=None),
                                   limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))  # fmt: skip
    monitor = ClientMonitor()
    started: set[int] = set()
    pending: list[RequestRecord] = []
    closing = False

    async def one(i: int) -> None:
        async def go(rec: RequestRecord) -> RequestRecord:
            hdrs = {**spec.headers[i], "X-Request-Id": spec.id_template[i].format(seq=rec.seq)} if i in spec.id_template else spec.headers[i]
            rec.staggered = rec.seq == 0 and i in spec.first
            try:
                return await stream_request(client, spec.url, spec.first[i] if rec.staggered else spec.streams[i], rec, headers=hdrs,
                                            on_tokens=on_tokens, keep_text=spec.keep_text, count_path=spec.count_path)  # fmt: skip
            finally:
                pending.remove(rec)
                send(("record", rec))

        def begin(rec: RequestRecord) -> None:
            pending.append(rec)

        if not await run_stream(i, go, begin, lambda: not closing):
            send(("dead", i))

    async def ticker() -> None:  # first tokens and token counts reach the parent within 50 ms
        nonlocal tokens
        while True:
            await anyio.sleep(0.05)
            for r in pending:
                if r.first_token is not None and r.stream_index not in started:
                    started.add(r.stream_index)
                    send(("started", r.stream_index))
            if tokens:
                send(("tokens", tokens))
                tokens = 0
            flush()

    async with client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(monitor.sample)
            tg.start_soon(ticker)
            for i in spec.streams:
                tg.start_soon(one, i)
            while True:  # wait for "stop" (or the parent going away)
                msg = await control()
                if msg is None:
                    break
                if msg[0] == "stop":
                    _, window_end, wait_s = msg
                    closing = True
                    with anyio.move_on_after(wait_s):
                        while any(r.first_token is None and r.ended is None and r.sent <= window_end for r in pending):
                            await anyio.sleep(0.002)
                    break
            tg.cancel_scope.cancel()
    send(("load", (monitor.result(), monitor.ticks)))
    send(("bye", None))
    flush()


async def _worker(spec: WorkerSpec) -> None:
    """The subprocess worker: messages are length-prefixed pickles over stdout, control over stdin."""
    import asyncio

    loop = asyncio.get_running_loop()
    out = sys.stdout.buffer
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)

    def send(obj: Any) -> None:
        out.write(_frame(obj))  # small writes to a pipe the parent drains; flushed in batches

    async def control() -> Any:
        try:
            head = await stdin.readexactly(4)
            return pickle.loads(await stdin.readexactly(_LEN.unpack(head)[0]))
        except (asyncio.IncompleteReadError, ConnectionError):
            return None

    await worker_loop(spec, send, out.flush, control)


def _read_exact(fd: int, size: int) -> bytes:
    """Exactly ``size`` bytes from ``fd``, unbuffered: what follows the spec ("stop") is the event loop's to read."""
    data = b""
    while len(data) < size:
        part = os.read(fd, size - len(data))
        if not part:
            raise SystemExit(0)  # the parent went away before sending the spec
        data += part
    return data


def main() -> None:
    spec = pickle.loads(_read_exact(0, _LEN.unpack(_read_exact(0, 4))[0]))
    anyio.run(_worker, spec)


if __name__ == "__main__":
    main()
