"""A request on a pooled keep-alive connection that the server closed as the pool handed it out fails before any
answer: a FIN read first (httpx ``RemoteProtocolError``: "Server disconnected without sending a response"), or an
RST for the request written into the closed socket (``ReadError`` / ``WriteError``). Servers close idle connections
after a few seconds, and a cell's end closes many at once. The server never read that request, so a call that asks
nothing of the engine's state (a health probe, a token count, an abort of everything) is sent again on a fresh
connection. Streams do the same with a finer test (stream/client.py: only where no answer and no new connection)."""

from __future__ import annotations

from typing import Awaitable, Callable

import httpx

__all__ = ["STALE_CONNECTION_RETRIES", "STALE_ERRORS", "send_again_if_stale"]

STALE_CONNECTION_RETRIES = 2  # fresh connections tried when a pooled one was closed under us
STALE_ERRORS = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)  # never a timeout


async def send_again_if_stale(send: Callable[[], Awaitable[httpx.Response]], retries: int = STALE_CONNECTION_RETRIES) -> httpx.Response:
    """``send()``, and again (at most ``retries`` more times) when it failed as a closed pooled connection does; the
    last such error is raised."""
    for tries_left in range(retries, -1, -1):
        try:
            return await send()
        except STALE_ERRORS:
            if not tries_left:
                raise
    raise AssertionError("not reached")  # the loop returns or raises
