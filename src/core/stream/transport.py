"""A raw asyncio HTTP/1.1 streaming client (``matrix.transport = "raw"``, and what ``"auto"`` picks for plain
http(s) endpoints: transport_choice.py).

Why it exists: through httpx every network read costs a trip through httpcore, h11 and an async
iterator (~tens of µs here); an engine that sends one chunk per stream per decode step makes that the
client's whole budget at high N. Here the bytes of a read are handled inside the protocol's
``data_received`` callback — HTTP framing, SSE split, JSON, token count — with one timestamp taken as
the callback starts, and no task wakes up until the response ends. It speaks exactly what a streamed
completion needs: one request per connection at a time, ``Content-Length`` request bodies, chunked /
length / close-delimited responses, keep-alive with a pool per host, TLS for ``https``.

Outcomes mirror the httpx path's (``client.classify_error``): refused/timed-out connects are
``connect_error``, a silent stream ``idle_timeout``, a connection closed mid-body ``truncated``, a reset
``reset``. Connect failures are counted on the run's ``WatchedTransport`` so engine-down detection
sees them too.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Any, Callable
from urllib.parse import urlsplit

import httpx

from infermatrix.core.stream.chunks import ChunkParser
from infermatrix.core.stream.sse import SSESplitter
from infermatrix.core.types import RequestRecord

__all__ = ["RawClient"]

_monotonic_ns = time.monotonic_ns
_MAX_HEAD = 64 * 1024


class _Response(asyncio.Protocol):
    """One connection; parses the response to the request in flight straight into a ChunkParser."""

    def __init__(self, client: RawClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_s = client.idle_timeout_s
        self.reset_request(None, None, None)

    def reset_request(self, parser: ChunkParser | None, split: SSESplitter | None, done: asyncio.Future[str] | None) -> None:
        self.parser, self.split, self.done = parser, split, done
        self.buf = b""
        self.head_done = False
        self.status = 0
        self.chunked = False
        self.remaining = -1  # body bytes left (Content-Length), -1: not length-delimited
        self.chunk_left = 0  # bytes left in the current chunk (+2 for its CRLF)
        self.keep_alive = True
        self.error_body = b""
        self.got_bytes = False
        self.last_read = time.monotonic()

    # --- asyncio.Protocol -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.done is not None and not self.done.done():
            if exc is None and self.head_done and not self.chunked and self.remaining < 0:
                self._finish("eof")  # a close-delimited body ended
            else:
                # Closed or reset before a byte of the answer: on a pooled connection, the server had closed it
                # (keep-alive timeout) before our request reached it -- retried once on a fresh one (stream_request).
                self._finish("stale" if not self.got_bytes else ("reset" if exc is not None else "truncated"))

    def data_received(self, data: bytes) -> None:
        t = _monotonic_ns()  # one stamp for every event in this read
        self.got_bytes = True
        self.last_read = t / 1e9
        if self.done is None or self.done.done():
            return  # bytes after the response (a misbehaving server): the connection is not reused
        if not self.head_done:
            data = self.buf + data
            end = data.find(b"\r\n\r\n")
            if end < 0:
                if len(data) > _MAX_HEAD:
                    self._finish("bad_head")
                self.buf = data
                return
            self.buf = b""
            if not self._head(data[:end]):
                return
            data = data[end + 4 :]
        if self.chunked:
            self._dechunk(data, t)
        elif self.remaining >= 0:
            take = data[: self.remaining]
            self.remaining -= len(take)
            self._body(take, t)
            if self.remaining == 0:
                self._finish("ok")
        else:
            self._body(data, t)

    # --- framing --------------------------------------------------------------------------------
    def _head(self, head: bytes) -> bool:
        lines = head.split(b"\r\n")
        try:
            self.status = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError):
            self._finish("bad_head")
            return False
        version_10 = lines[0].startswith(b"HTTP/1.0")
        self.keep_alive = not version_10
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            k = k.strip().lower()
            v = v.strip().lower()
            if k == b"transfer-encoding" and b"chunked" in v:
                self.chunked = True
            elif k == b"content-length":
                self.remaining = int(v)
            elif k == b"connection":
                self.keep_alive = v == b"keep-alive" if version_10 else v != b"close"
            elif k == b"content-encoding" and v not in (b"identity", b""):
                self._finish("encoded")  # never asked for (no Accept-Encoding): not ours to decode
                return False
        self.head_done = True
        if self.remaining == 0 and not self.chunked:
            self._finish("ok")
            return False
        return True

    def _dechunk(self, data: bytes, t: int) -> None:
        """Strip chunked framing; ``chunk_left`` > 0: data bytes left in this chunk, < 0: CRLF bytes
        left after it, 0: a size line comes next."""
        buf = self.buf + data if self.buf else data
        self.buf = b""
        out: list[bytes] = []
        pos, n = 0, len(buf)
        while pos < n:
            left = self.chunk_left
            if left > 0:
                take = min(left, n - pos)
                out.append(buf[pos : pos + take])
                pos += take
                left -= take
                self.chunk_left = -2 if left == 0 else left
            elif left < 0:
                have = min(-left, n - pos)
                pos += have
                self.chunk_left = left + have
            else:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    self.buf = buf[pos:]  # a size line split across reads
                    break
                try:
                    size = int(buf[pos:eol].split(b";", 1)[0], 16)
                except ValueError:
                    self._finish("bad_chunk")
                    return
                pos = eol + 2
                if size == 0:  # the last chunk; anything but the bare closing CRLF (trailers) is not worth pooling for
                    if buf[pos:] != b"\r\n":
                        self.keep_alive = False
                    if out:
                        self._body(b"".join(out), t)
                    self._finish("ok")
                    return
                self.chunk_left = size
        if out:
            self._body(out[0] if len(out) == 1 else b"".join(out), t)

    def _body(self, data: bytes, t: int) -> None:
        if not data:
            return
        if self.status >= 400:
            if len(self.error_body) < 4096:
                self.error_body += data
            return
        assert self.parser is not None and self.split is not None
        if not self.parser.feed(self.split.feed(data), t):
            self._finish("parser")

    def _finish(self, how: str) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(how)


class RawClient:
    """Streams completions over raw asyncio connections; one idle pool per (scheme, host, port)."""

    def __init__(self, *, connect_timeout_s: float = 10.0, idle_timeout_s: float = 120.0, watch: Any = None):
        self.connect_timeout_s = connect_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.watch = watch  # a WatchedTransport-like object: .consecutive, .last_error
        self.idle: dict[tuple[str, str, int], list[_Response]] = {}
        self.busy: set[_Response] = set()
        self._ssl: ssl.SSLContext | None = None

    async def aclose(self) -> None:
        for conns in self.idle.values():
            for c in conns:
                if c.transport is not None:
                    c.transport.close()
        self.idle.clear()
        for c in list(self.busy):
            if c.transport is not None:
                c.transport.abort()

    async def __aenter__(self) -> RawClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _connect(self, key: tuple[str, str, int]) -> _Response:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        ctx = None
        if scheme == "https":
            # httpx's own TLS settings (its certificate store, SSL_CERT_FILE): the same checks as the rest of the run.
            ctx = self._ssl = self._ssl or httpx.create_ssl_context()
        try:
            _, proto = await asyncio.wait_for(
                loop.create_connection(lambda: _Response(self), host, port, ssl=ctx, server_hostname=host if ctx else None),
                self.connect_timeout_s,
            )
        except (OSError, asyncio.TimeoutError) as exc:
            if self.watch is not None:
                self._count_error()
                self.watch.consecutive += 1
                self.watch.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise
        if self.watch is not None:
            self.watch.consecutive = 0
        return proto

    def _count_error(self) -> None:
        """A transport failure, counted where the run's engine-down check looks (``WatchedTransport.errors``)."""
        self.watch.errors = getattr(self.watch, "errors", 0) + 1

    def _pooled(self, key: tuple[str, str, int]) -> _Response | None:
        conns = self.idle.get(key)
        while conns:
            c = conns.pop()
            if not c.closed and c.transport is not None and not c.transport.is_closing():
                return c
        return None

    async def stream_request(
        self, url: str, content: bytes, record: RequestRecord, *, headers: dict[str, str],
        on_tokens: Callable[[int], None] | None = None, keep_text: bool = True, idle_timeout_s: float | None = None,
        count_path: tuple[str, ...] = (),
    ) -> RequestRecord:
        """The raw-transport twin of ``client.stream_request`` (same record, same outcomes); ``record.sent``
        is set as the request is handed to a connected socket (after connecting or taking a pooled connection,
        just before the write)."""
        u = urlsplit(url)
        key = (u.scheme, u.hostname or "127.0.0.1", u.port or (443 if u.scheme == "https" else 80))
        target = (u.path or "/") + (f"?{u.query}" if u.query else "")
        host = u.netloc.rsplit("@", 1)[-1]
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        req = f"POST {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(content)}\r\n{head}\r\n".encode() + content
        record.sent = record.opened = time.monotonic()
        parser = ChunkParser(record, on_tokens, keep_text, count_path)
        conn: _Response | None = None
        try:
            for attempt in (0, 1):  # a pooled connection the server already closed gets one fresh retry
                conn = self._pooled(key) if attempt == 0 else None
                if conn is None:
                    try:
                        conn = await self._connect(key)
                    except asyncio.TimeoutError:
                        record.outcome, record.error = "connect_error", f"ConnectTimeout: no connection within {self.connect_timeout_s:g} s"
                        return record
                    except OSError as exc:
                        record.outcome, record.error = "connect_error", f"ConnectError: {exc}"[:500]
                        return record
                    attempt = 1
                how = await self._exchange(conn, req, parser, idle_timeout_s or self.idle_timeout_s)
                if how != "stale" or attempt == 1:
                    break
                parser = ChunkParser(record, on_tokens, keep_text, count_path)
            assert conn is not None
            self._settle(conn, how, parser, key)
        except asyncio.CancelledError:
            record.outcome = "cancelled" if record.finish_reason is None else record.outcome
            if conn is not None and conn.transport is not None:
                conn.transport.close()  # the server sees the disconnect and aborts the request
            raise
        finally:
            if conn is not None:
                self.busy.discard(conn)
            record.ended = time.monotonic()
            parser.close()
        return record

    async def _exchange(self, conn: _Response, req: bytes, parser: ChunkParser, idle_s: float) -> str:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[str] = loop.create_future()
        conn.reset_request(parser, SSESplitter(), done)
        self.busy.add(conn)
        assert conn.transport is not None
        # Stamped before the write, not after it returns: the write wakes the server, and on busy cores the kernel may
        # run it before this process reads its clock (seen 17 ms late on a real engine: a TTFT under the server's own
        # prompt evaluation). docs/metrics.md, "Request sent".
        parser.record.sent = time.monotonic()
        conn.transport.write(req)
        parser.record.written = True
        conn.idle_s = idle_s
        timer = loop.call_later(idle_s, self._check_idle, conn, done)
        try:
            return await done
        finally:
            timer.cancel()

    def _check_idle(self, conn: _Response, done: asyncio.Future[str]) -> None:
        """Fires once per idle period, not once per read: a read only moves ``last_read`` forward."""
        if done.done():
            return
        late = time.monotonic() - conn.last_read
        if late >= conn.idle_s:
            done.set_result("idle")
        else:
            asyncio.get_running_loop().call_later(conn.idle_s - late, self._check_idle, conn, done)

    def _settle(self, conn: _Response, how: str, parser: ChunkParser, key: tuple[str, str, int]) -> None:
        """Record how the exchange ended; pool the connection only after a cleanly finished response."""
        record = parser.record
        reusable = how == "ok" and conn.keep_alive and not conn.closed
        if how in ("ok", "eof") and conn.status < 400 and record.outcome == "ok":
            split = conn.split
            if split is not None and split.pending.strip():
                parser.feed(split.feed(b"\n\n"), _monotonic_ns())
            if not parser.done and record.finish_reason is None:
                record.outcome, record.error = "truncated", "stream ended before [DONE]"
        elif how in ("ok", "eof") and conn.status >= 400:
            record.outcome = "http_error"
            record.error = f"HTTP {conn.status}: {conn.error_body[:500].decode(errors='replace')}"
        elif how != "parser":  # the parser has already written its error into the record
            if how in ("idle", "reset", "truncated", "stale") and self.watch is not None:
                self._count_error()  # as httpx's transport errors are: the run asks whether the engine is still there
            record.outcome, record.error = {
                "idle": ("idle_timeout", f"ReadTimeout: no data for {conn.idle_s:g} s"),
                "reset": ("reset", "ReadError: connection reset by the server"),
                "truncated": ("truncated", "RemoteProtocolError: peer closed connection without sending complete message body"),
                "stale": ("reset", "ReadError: the server closed the connection before answering"),
                "encoded": ("stream_error", "the server compressed the stream without being asked (Content-Encoding)"),
            }.get(how, ("stream_error", f"unreadable HTTP response ({how})"))
        if reusable:
            conn.reset_request(None, None, None)
            self.idle.setdefault(key, []).append(conn)
        elif conn.transport is not None:
            conn.transport.close()
