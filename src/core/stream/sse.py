"""Server-sent events split from raw bytes, without a line iterator.

A streamed completion is a sequence of ``data: {...}`` events separated by a blank line. Reading it
through a text line iterator decodes, splits and allocates a ``str`` per line; here the bytes of one
network read are cut on the blank line and only the payloads are handed on, still as ``bytes`` (orjson
parses bytes directly). Fields other than ``data`` (``event:``, ``id:``, ``retry:``, comments) carry
nothing an OpenAI-compatible stream needs and are skipped.
"""

from __future__ import annotations

__all__ = ["SSESplitter", "DONE"]

DONE = b"[DONE]"


class SSESplitter:
    """Feed it the bytes of each read; it returns the ``data`` payloads of the events completed so far."""

    __slots__ = ("_buf", "_crlf")

    def __init__(self) -> None:
        self._buf = b""
        self._crlf = False  # a server that ends lines with \r\n: normalised once seen (rare: common engines and the sim send \n)

    def feed(self, data: bytes) -> list[bytes]:
        if self._buf:
            data = self._buf + data
        if not self._crlf and b"\r" in data:
            self._crlf = True
        if self._crlf:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        parts = data.split(b"\n\n")
        self._buf = parts.pop()  # the unfinished tail (empty when the read ended on an event boundary)
        out: list[bytes] = []
        for ev in parts:
            if ev[:6] == b"data: " and b"\n" not in ev:  # the common shape: one data line
                out.append(ev[6:])
            elif ev:
                payload = _data_lines(ev)
                if payload is not None:
                    out.append(payload)
        return out

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet ended by a blank line (a stream cut mid-event leaves some)."""
        return self._buf


def _data_lines(event: bytes) -> bytes | None:
    """The joined ``data`` lines of one event (SSE: several data lines join with newlines), or None."""
    lines = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            v = line[5:]
            lines.append(v[1:] if v[:1] == b" " else v)
    return b"\n".join(lines) if lines else None
