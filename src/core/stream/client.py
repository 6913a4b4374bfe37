"""One streamed OpenAI-API request, timed as the client sees it.

The request body is encoded once per prompt (:func:`encode_body`, orjson) and sent as bytes on every
restart. The answer is read as raw bytes, split into server-sent events by :class:`SSESplitter`, and
stamped once per network read (:mod:`chunks`). Each stream is read to its end after ``[DONE]``, so the
connection returns to the pool and the next request of the stream does not pay a new connect inside
its TTFT. The transport is httpx or the raw asyncio HTTP/1.1 reader of :mod:`transport` (``matrix.transport``;
``"auto"``, the default, picks: :mod:`transport_choice`); both feed the same parser, so they record the same things.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import anyio
import httpx
import orjson

from infermatrix.core.engine.stale import STALE_CONNECTION_RETRIES, STALE_ERRORS
from infermatrix.core.engine.traits import EngineTraits, merge_body
from infermatrix.core.stream.chunks import ChunkParser
from infermatrix.core.stream.sse import SSESplitter
from infermatrix.core.types import RequestRecord

__all__ = ["request_body", "encode_body", "stream_request", "endpoint_path", "classify_error", "JSON_HEADERS"]

_PLAIN = EngineTraits()  # a plain OpenAI-compatible server
JSON_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
_monotonic_ns = time.monotonic_ns


def endpoint_path(api: str) -> str:
    return "/v1/chat/completions" if api == "chat" else "/v1/completions"


def request_body(
    api: str, model: str, prompt: str, max_tokens: int, *, ignore_eos: bool = True, traits: EngineTraits | None = None
) -> dict[str, Any]:
    """A streaming request: standard OpenAI fields plus ``stream_options.include_usage``, and what
    the engine's ``traits`` say it accepts (per-chunk usage, ignore EOS, further extras)."""
    t = traits or _PLAIN
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
    }
    if t.per_chunk_usage:
        merge_body(body, t.per_chunk_usage_fields)
    if ignore_eos and t.ignore_eos:
        merge_body(body, t.ignore_eos_fields)
    if t.body_extras:
        merge_body(body, t.body_extras)
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def encode_body(body: dict[str, Any] | bytes) -> bytes:
    """The request body as sent: encoded once (a 256K-token prompt is ~1 MB, which stdlib json would
    re-encode on every restart, inside the TTFT)."""
    return body if isinstance(body, bytes) else orjson.dumps(body)



def classify_error(exc: BaseException) -> str:
    """Map a transport exception to a request outcome."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return "connect_error"
    if isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout | httpx.PoolTimeout | TimeoutError):
        return "idle_timeout"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "truncated"
    if isinstance(exc, httpx.ReadError | httpx.WriteError | ConnectionError):
        return "reset"
    return "stream_error"


async def stream_request(
    client: Any,
    url: str,
    body: dict[str, Any] | bytes,
    record: RequestRecord,
    *,
    headers: dict[str, str] | None = None,
    on_tokens: Callable[[int], None] | None = None,
    keep_text: bool = True,
    timeout: httpx.Timeout | None = None,
    count_path: tuple[str, ...] = (),
) -> RequestRecord:
    """Send ``body`` (a dict, or JSON already encoded) to ``url``, stream the answer into ``record``;
    never raises for server faults. ``record.sent`` is when the request is handed to a connection, just
    before its first byte is written (docs/metrics.md): encoding, the connection pool and connecting happen before it. ``timeout``
    overrides the client's (its ``read`` part is the idle limit of this one request).

    ``client`` is an ``httpx.AsyncClient`` or a :class:`~infermatrix.core.stream.transport.RawClient`.
    ``count_path``: where a chunk carries the cumulative generated-token count when it is not
    ``usage.completion_tokens`` (``EngineTraits.per_chunk_usage_path``).
    Cancellation (the window closing) marks the request ``cancelled`` and re-raises.
    """
    content = encode_body(body)
    hdrs = {**JSON_HEADERS, **headers} if headers else JSON_HEADERS
    if not isinstance(client, httpx.AsyncClient):
        idle = timeout.read if timeout is not None else None
        return await client.stream_request(url, content, record, headers=hdrs, on_tokens=on_tokens, keep_text=keep_text, idle_timeout_s=idle,
                                           count_path=count_path)
    record.sent = record.opened = time.monotonic()  # until the request is handed to a connection; kept if it never gets that far

    connected = False  # this attempt opened a new connection (not a pooled one)

    async def trace(event: str, info: Any) -> None:
        nonlocal connected
        if event.endswith("send_request_headers.started"):  # connected: the request's first byte is about to go
            record.sent = time.monotonic()  # before the write, as the raw transport's (docs/metrics.md, "Request sent")
        elif event.endswith("send_request_body.complete"):
            record.written = True
        elif event.startswith("connection.connect_tcp"):
            connected = True

    extra: dict[str, Any] = {"timeout": timeout} if timeout is not None else {}
    parser = ChunkParser(record, on_tokens, keep_text, count_path)
    split = SSESplitter()
    # A kept-alive connection the server closed just as the pool handed it out fails before any answer:
    # "Server disconnected without sending a response" (its FIN read first), or a ReadError/WriteError (the
    # request written into the closed socket drew an RST; a slow client racing the server's keep-alive timeout
    # does this). The server never saw this request, so it is sent again rather than counted as failed (raw
    # transport: the same). A new connection closed or reset without an answer is the server's fault: not retried.
    stale_retries = STALE_CONNECTION_RETRIES
    try:
        while True:
            answered = connected = False
            try:
                async with client.stream("POST", url, content=content, headers=hdrs, extensions={"trace": trace}, **extra) as resp:
                    answered = True
                    if resp.status_code >= 400:
                        raw = await resp.aread()
                        record.outcome = "http_error"
                        record.error = f"HTTP {resp.status_code}: {raw[:500].decode(errors='replace')}"
                        return record
                    # Raw bytes unless the server compressed them (SSE seldom is): no decoder, no line iterator.
                    pieces = resp.aiter_bytes() if "content-encoding" in resp.headers else resp.aiter_raw()
                    async for data in pieces:
                        t = _monotonic_ns()  # one stamp per read, for every event in it
                        if not parser.feed(split.feed(data), t):
                            return record  # leaving the block closes this connection: its stream is in an unknown state
                finish_stream(parser, split)
            except (httpx.HTTPError, ConnectionError) as exc:
                stale = isinstance(exc, STALE_ERRORS) and not answered and not connected
                if stale and stale_retries > 0:
                    stale_retries -= 1
                    continue
                record.outcome = classify_error(exc)
                record.error = f"{type(exc).__name__}: {exc}"[:500]
            return record
    except anyio.get_cancelled_exc_class():
        record.outcome = "cancelled" if record.finish_reason is None else record.outcome
        raise
    finally:
        record.ended = time.monotonic()
        parser.close()


def finish_stream(parser: ChunkParser, split: SSESplitter) -> None:
    """The body ended cleanly: a last event without its blank line still counts; no ``[DONE]`` and no
    ``finish_reason`` means the server cut the stream short."""
    if split.pending.strip():
        parser.feed(split.feed(b"\n\n"), _monotonic_ns())
    record = parser.record
    if record.outcome == "ok" and not parser.done and record.finish_reason is None:
        record.outcome, record.error = "truncated", "stream ended before [DONE]"
