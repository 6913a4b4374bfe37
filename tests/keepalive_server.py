"""A loopback HTTP server that closes its keep-alive connections under the client's pool: it answers the first request
on each connection and closes the connection, unanswered, on the next — a server's keep-alive limit or idle timeout
racing the client (FIN, or RST with ``reset``). For the "a call on a closed pooled connection is sent again" tests."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator
from typing import Callable


def http_answer(body: bytes, content_type: str = "application/json") -> bytes:
    """A whole HTTP/1.1 200 answer carrying ``body``."""
    return b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (content_type.encode(), len(body), body)


class KeepAliveThenDrop:
    """``answer``: the bytes of every answer, or a function of the request's path giving them (``None``: that request
    is closed unanswered). ``drop_first`` drops every request."""

    def __init__(self, answer: bytes | Callable[[str], bytes | None], drop_first: bool = False, reset: bool = False):
        self.answer = answer
        self.drop_first = drop_first
        self.reset = reset  # close with an RST (SO_LINGER 0) rather than a FIN
        self.connections = 0
        self.answered = 0

    def _answer_for(self, head: bytes) -> bytes | None:
        return self.answer(head.split(b" ")[1].decode()) if callable(self.answer) else self.answer

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
                await reader.readexactly(length)
                answer = None if served or self.drop_first else self._answer_for(head)
                if answer is None:
                    if self.reset:
                        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return  # closed with no answer
                writer.write(answer)
                await writer.drain()
                served += 1
                self.answered += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def serving(server: KeepAliveThenDrop) -> AsyncIterator[int]:
    """``server`` on a loopback port (yielded) while the block runs."""
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    try:
        yield srv.sockets[0].getsockname()[1]
    finally:
        srv.close()
        await srv.wait_closed()
