#!/usr/bin/env python3
"""A minimal, near-free OpenAI-shaped SSE server for ``scripts/bench_client.py``.

    python scripts/bench_sse_server.py --port 8123 --mode flood --batch 16
    python scripts/bench_sse_server.py --port 8123 --mode paced --rate 100

Every ``POST /v1/completions`` (or ``/v1/chat/completions``) streams ``max_tokens`` completion chunks,
each with cumulative usage, then a usage chunk and ``[DONE]``, over HTTP/1.1 chunked encoding with
keep-alive. Each chunk's text is ``" <t_ns>"``: the server's ``time.monotonic_ns()`` when it wrote the
chunk (system-wide on Linux), so a client on the same host can measure how late it stamped each event.

- ``flood``: each connection writes ``--batch`` chunks per write as fast as the socket takes them
  (the server is never the bottleneck: events are pre-encoded apart from the stamp).
- ``paced``: one ticker for all connections writes one chunk to every open stream each 1/``--rate`` s,
  like an engine's decode step.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import orjson

_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
         b"transfer-encoding: chunked\r\n\r\n")  # fmt: skip


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(i: int, t_ns: int, finish: bool) -> bytes:
    fin = b'"length"' if finish else b"null"
    return (b'data: {"id":"cmpl-b","object":"text_completion","model":"bench","choices":[{"index":0,"text":" %d",'
            b'"logprobs":null,"finish_reason":%s}],"usage":{"prompt_tokens":8,"completion_tokens":%d,"total_tokens":%d}}\n\n'
            % (t_ns, fin, i, i + 8))  # fmt: skip


def _tail(n: int) -> bytes:
    return (b'data: {"id":"cmpl-b","object":"text_completion","model":"bench","choices":[],'
            b'"usage":{"prompt_tokens":8,"completion_tokens":%d,"total_tokens":%d}}\n\ndata: [DONE]\n\n' % (n, n + 8))


_FLOOD: dict[tuple[int, int], list[bytes]] = {}


def _flood_body(n: int, batch: int) -> list[bytes]:
    """A whole flood response, built once per (max_tokens, batch) and cut into ~64 KB writes: the server's
    own cost per event is then close to nothing (the stamp is the build time: lags mean nothing in flood)."""
    key = (n, batch)
    if key not in _FLOOD:
        t = time.monotonic_ns()
        chunks = [_chunk(b"".join(_event(i + 1, t, i + 1 == n) for i in range(s, min(n, s + batch)))) for s in range(0, n, batch)]
        writes, cur = [], b""
        for c in chunks:
            cur += c
            if len(cur) >= 65536:
                writes.append(cur)
                cur = b""
        _FLOOD[key] = writes + ([cur] if cur else [])
    return _FLOOD[key]


class Paced:
    """The shared ticker of ``paced`` mode: streams register a queue and get a wake-up per tick."""

    def __init__(self, rate: float):
        self.period = 1.0 / rate
        self.streams: set[asyncio.Event] = set()

    async def run(self) -> None:
        t = time.monotonic()
        while True:
            t += self.period
            await asyncio.sleep(max(0.0, t - time.monotonic()))
            for ev in list(self.streams):
                ev.set()


async def _read_request(reader: asyncio.StreamReader) -> int | None:
    """max_tokens of the next request on this connection, or None when the client closed it."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    body = orjson.loads(await reader.readexactly(length)) if length else {}
    return int(body.get("max_tokens", 16))


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, mode: str, batch: int, paced: Paced | None) -> None:
    try:
        while True:
            n = await _read_request(reader)
            if n is None:
                return
            writer.write(_HEAD)
            i = 0
            if paced is None:
                for piece in _flood_body(n, batch):
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0)  # let the other connections write too
                i = n
            else:
                tick = asyncio.Event()
                paced.streams.add(tick)
                try:
                    while i < n:
                        await tick.wait()
                        tick.clear()
                        i += 1
                        writer.write(_chunk(_event(i, time.monotonic_ns(), i == n)))
                finally:
                    paced.streams.discard(tick)
            writer.write(_chunk(_tail(n)) + b"0\r\n\r\n")
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def main_async(args: argparse.Namespace) -> None:
    paced = Paced(args.rate) if args.mode == "paced" else None
    server = await asyncio.start_server(lambda r, w: handle(r, w, args.mode, args.batch, paced), args.host, args.port, backlog=4096)
    tasks = [asyncio.ensure_future(paced.run())] if paced else []
    print("ready", flush=True)
    async with server:
        await server.serve_forever()
    for t in tasks:
        t.cancel()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8123)
    ap.add_argument("--mode", choices=("flood", "paced"), default="flood")
    ap.add_argument("--batch", type=int, default=16, help="flood: chunks per write")
    ap.add_argument("--rate", type=float, default=100.0, help="paced: chunks per second per stream")
    try:
        asyncio.run(main_async(ap.parse_args()))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
