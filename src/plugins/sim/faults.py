"""Fault injection for the simulated engine: the ways a real server fails, on purpose and on schedule.

A profile's ``[faults]`` table says what goes wrong; the server calls the hooks here and nothing else
of it knows about faults. Generation requests (``POST /v1/completions``, ``/v1/chat/completions``)
are numbered from 1 over the server's life; rules pick requests by number (``every``, ``first``,
``limit``) or by chance (``probability``, seeded), and the first rule that picks a request applies::

    [faults]
    seed = 1
    [[faults.requests]]                 # HTTP 500 on requests 5, 10, 15 ...
    kind = "http_error"
    status = 500
    every = 5
    [[faults.requests]]                 # 1 in 10 streams stops after 3 chunks, without [DONE]
    kind = "truncate"
    probability = 0.1
    after_chunks = 3
    [faults.exit]                       # the process dies when request 40 arrives
    after_requests = 40
    code = 3

Request fault kinds: ``http_error`` (an error answer with ``status``), ``stream_error`` (an error
object inside a 200 stream), ``truncate`` (the stream ends cleanly before ``[DONE]``), ``stall``
(the stream goes silent for ``stall_s``), ``reset`` (the TCP connection is reset). A rule without
``every`` or ``probability`` hits every request from ``first`` on, so
``[[faults.requests]] kind = "http_error" status = 503`` is a server that answers ``/health`` but
rejects requests. ``never_ready = true`` makes ``/health`` answer 503 forever.

The API key (``INFERMATRIX_SIM_API_KEY`` in the server's environment, never in the profile, which
is served at ``/debug/profile`` and stored with runs) is checked here too, on ``/v1/*`` as vLLM does.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Literal, MutableMapping

from pydantic import Field, model_validator

from infermatrix.plugin import Strict
from infermatrix.plugins.sim.phases import PHASES, PhaseTracker

Phase = Literal["describe", "tokenize", "metrics", "prefill", "warmup", "ramp", "steady", "window", "drain", "between"]

__all__ = ["RequestFault", "ExitFault", "SimFaults", "FaultState", "AuthGuard", "API_KEY_ENV", "PHASES"]

API_KEY_ENV = "INFERMATRIX_SIM_API_KEY"
SETTLE_TURNS = 10  # loop turns a /health waits for stream closes that arrived with it (AuthGuard)


class RequestFault(Strict):
    """One fault that hits some generation requests."""

    kind: Literal["http_error", "stream_error", "truncate", "stall", "reset", "exit"]
    phase: Phase | None = Field(None, description="hit only requests of this phase (phases.py), numbered within it; none: generation requests")
    every: int | None = Field(None, ge=1, description="hit request numbers k, 2k, 3k ... (counted from 1 over the server's life)")
    probability: float | None = Field(None, ge=0, le=1, description="hit each request with this chance (seeded by faults.seed)")
    first: int = Field(1, ge=1, description="hit no request numbered below this")
    limit: int | None = Field(None, ge=1, description="hit at most this many requests")
    max_tokens: int | None = Field(None, ge=1, description="hit only requests asking for this many tokens (1: warm-ups and prefill probes)")
    status: int = Field(500, ge=400, le=599, description="http_error: the status code (429, 500, 503 ...)")
    message: str = Field("injected fault", description="the error message; '{authorization}' becomes the request's Authorization header, as an echoing proxy would")
    after_chunks: int = Field(2, ge=0, description="stream faults: chunks sent before the fault")
    stall_s: float = Field(3600.0, gt=0, description="stall: seconds of silence before the stream (or answer) carries on")
    code: int = Field(1, ge=0, le=255, description="exit: the process's exit code")
    once_file: str | None = Field(None, description="hit only while this file is missing, and create it (a restarted sim stays well)")

    @model_validator(mode="after")
    def _one_selector(self) -> RequestFault:
        if self.every is not None and self.probability is not None:
            raise ValueError("give every or probability, not both")
        if self.kind == "exit" and self.phase is None:
            raise ValueError("kind exit needs a phase (or use faults.exit)")
        return self


class ExitFault(Strict):
    """The server process dies (``os._exit``): no goodbye, open connections drop."""

    after_requests: int | None = Field(None, ge=1, description="exit when this generation request arrives")
    after_s: float | None = Field(None, gt=0, description="exit this long after the server is up")
    code: int = Field(1, ge=0, le=255)
    once_file: str | None = Field(None, description="exit only if this file is missing, and create it first (a restarted server then stays up)")

    @model_validator(mode="after")
    def _when(self) -> ExitFault:
        if self.after_requests is None and self.after_s is None:
            raise ValueError("give after_requests or after_s")
        return self


class SimFaults(Strict):
    """What goes wrong with this server (nothing, by default)."""

    seed: int = 0
    requests: list[RequestFault] = Field(default_factory=list)
    exit: ExitFault | None = None
    never_ready: bool = Field(False, description="/health answers 503 forever")
    shutdown_delay_s: float = Field(0.0, ge=0, description="on SIGINT/SIGTERM, block this long before shutting down (an engine slow to exit)")
    log_api_key: bool = Field(False, description="print the API key at startup, as engines that log their arguments do")


async def _events(stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    async for part in stream:
        for event in part.split(b"\n\n"):
            if event:
                yield event + b"\n\n"


def _log(msg: str) -> None:
    print(f"infermatrix-sim: injected fault: {msg}", file=sys.stderr, flush=True)


class FaultState:
    """The running server's side of :class:`SimFaults`: counts requests and decides what hits them."""

    def __init__(self, faults: SimFaults, api_key: str | None = None):
        self.api_key = api_key if api_key is not None else (os.environ.get(API_KEY_ENV) or None)
        self.connections: Callable[[], Any] | None = None  # uvicorn's live connections, when served by uvicorn
        self.configure(faults)

    def configure(self, faults: SimFaults) -> None:
        """Start over with ``faults`` (``POST /debug/faults``): counts, hits and phases from zero."""
        self.faults = faults
        self.requests = 0
        self.hits = [0] * len(faults.requests)
        self.phase_counts = dict.fromkeys(PHASES, 0)
        self.phases = PhaseTracker(on_enter=self._entered)
        self._rng = random.Random(faults.seed)

    # ---- the server's hooks -------------------------------------------------------------------

    def health_status(self) -> int:
        return 503 if self.faults.never_ready else 200

    def unauthorized(self, path: str, headers: Any) -> bool:
        """True when the API key is required here (``/v1/*``) and the request lacks it."""
        if not self.api_key or not path.startswith("/v1"):
            return False
        return headers.get("authorization") != f"Bearer {self.api_key}"

    def on_request(self, max_tokens: int | None = None, tags: set[str] | frozenset[str] = frozenset()) -> RequestFault | None:
        """Called as each generation request arrives: may exit the process; returns the fault that hits it."""
        self.requests += 1
        n = self.requests
        ex = self.faults.exit
        if ex is not None and ex.after_requests is not None and n >= ex.after_requests:
            self.exit_now(f"exiting with code {ex.code} at generation request {n}")
        return self.pick(tags, max_tokens, generation=True)

    def count_phases(self, tags: set[str]) -> None:
        """A request arrived in these phases (drain and between count once per occurrence, on entry)."""
        for tag in tags - {"drain", "between"}:
            self.phase_counts[tag] += 1

    def pick(self, tags: set[str] | frozenset[str], max_tokens: int | None = None, *, generation: bool = False,
             only_exit: bool = False) -> RequestFault | None:  # fmt: skip
        """The first rule that hits a request in phases ``tags`` (rules without a phase: generation requests only)."""
        for i, rule in enumerate(self.faults.requests):
            if rule.phase is None:
                if not generation:
                    continue
                n = self.requests
            elif rule.phase in tags:
                n = self.phase_counts[rule.phase]
            else:
                continue
            if only_exit and rule.kind != "exit":
                continue
            if n < rule.first or (rule.limit is not None and self.hits[i] >= rule.limit):
                continue
            if rule.max_tokens is not None and max_tokens != rule.max_tokens:
                continue
            if rule.once_file is not None and Path(rule.once_file).exists():
                continue
            if rule.probability is not None:
                hit = self._rng.random() < rule.probability
            elif rule.every is not None:
                hit = n % rule.every == 0
            else:
                hit = True
            if hit:
                self.hits[i] += 1
                if rule.once_file is not None:
                    Path(rule.once_file).write_text(f"{rule.kind} in {rule.phase}\n")
                if rule.phase is not None:
                    _log(f"{rule.kind} in {rule.phase} ({rule.phase} #{n})")
                if rule.kind == "exit":
                    self.exit_now(f"exiting with code {rule.code} in {rule.phase}", rule.code)
                return rule
        return None

    def _entered(self, phase: str) -> None:
        """The run entered drain or between: number it, and fire the exit rules for it."""
        self.phase_counts[phase] += 1
        self.pick({phase}, only_exit=True)

    def error_body(self, rule: RequestFault, headers: Any) -> tuple[int, bytes]:
        import orjson

        message = rule.message.replace("{authorization}", headers.get("authorization", ""))
        kind = "RateLimitError" if rule.status == 429 else "InternalServerError"
        return rule.status, orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": rule.status}})

    async def wrap_stream(self, rule: RequestFault | None, stream: AsyncIterator[bytes], scope: MutableMapping[str, Any]) -> AsyncIterator[bytes]:
        """The stream as the client gets it: untouched, or broken after ``rule.after_chunks`` chunks."""
        if rule is None or rule.kind == "http_error":
            async for part in stream:
                yield part
            return
        events = _events(stream)  # one SSE event at a time, however the server batched its writes
        sent = 0
        async for event in events:
            if sent >= rule.after_chunks:
                break
            yield event
            sent += 1
        else:
            return  # the stream ended before the fault's turn
        if rule.kind == "stream_error":
            import orjson

            err = {"error": {"message": rule.message, "type": "InternalServerError", "param": None, "code": 500}}
            yield b"data: " + orjson.dumps(err) + b"\n\n"
            yield b"data: [DONE]\n\n"
        elif rule.kind == "stall":
            await asyncio.sleep(rule.stall_s)
            async for event in events:
                yield event
        elif rule.kind == "reset":
            self._reset(scope)
        # truncate: return here, so the body ends cleanly without [DONE]

    def start(self) -> None:
        """Called once the server is up: arms the timed exit."""
        if self.faults.log_api_key and self.api_key:
            print(f"infermatrix-sim: non-default args: {{'api_key': '{self.api_key}'}}", file=sys.stderr, flush=True)
        ex = self.faults.exit
        if ex is not None and ex.after_s is not None:
            asyncio.get_running_loop().call_later(ex.after_s, self.exit_now, f"exiting with code {ex.code} after {ex.after_s:g} s", ex.code, ex.once_file)

    def slow_shutdown(self) -> None:
        if self.faults.shutdown_delay_s:
            _log(f"shutting down in {self.faults.shutdown_delay_s:g} s (deaf to signals until then)")
            time.sleep(self.faults.shutdown_delay_s)  # blocking on purpose: SIGINT/SIGTERM can't hurry it

    # ---- helpers ------------------------------------------------------------------------------

    def exit_now(self, why: str, code: int | None = None, once_file: str | None = None) -> None:
        ex = self.faults.exit
        if code is None and ex is not None:
            code, once_file = ex.code, ex.once_file
        if once_file:
            marker = Path(once_file)
            if marker.exists():
                return
            marker.write_text(why + "\n")
        _log(why)
        os._exit(code if code is not None else 1)

    def _reset(self, scope: MutableMapping[str, Any]) -> None:
        """Reset the request's TCP connection (RST, not FIN): SO_LINGER 0, then abort."""
        client = tuple(scope.get("client") or ())
        for proto in list(self.connections() if self.connections else ()):
            transport = getattr(proto, "transport", None)
            if transport is None or tuple(getattr(proto, "client", None) or ()) != client:
                continue
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
            return
        raise ConnectionResetError("injected reset")  # not served by uvicorn: drop the response instead


class AuthGuard:
    """ASGI middleware: the API key (``/v1/*`` answers 401 without ``Authorization: Bearer <key>``),
    the run's phases (each request tagged, ``scope["sim.phases"]``), and phase faults on every endpoint
    but generation (whose faults the generation handler applies, inside its stream) and ``/health``."""

    def __init__(self, app: Any, faults: FaultState):
        self.app, self.faults = app, faults

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or ()}
        path, method = scope.get("path", ""), scope.get("method", "GET")
        if self.faults.unauthorized(path, headers):
            await _answer(send, 401, b'{"error":{"message":"Unauthorized","type":"AuthenticationError","param":null,"code":401}}')
            return
        if path == "/health" or path.startswith("/debug/"):  # the truth about the server, never faulted
            if path == "/health":
                # The client closes the cell's streams before it asks /health; on a starved loop both arrive in one
                # poll, and this handler could run before the closed streams' cancellation has reached their
                # on_close (the drain). A few loop turns let that chain finish first: ordered by events, not time.
                for _ in range(SETTLE_TURNS):
                    await asyncio.sleep(0)
                self.faults.phases.health_asked()  # may be "between cells" (and an exit rule fire)
            await self.app(scope, receive, send)
            return
        faults, tracker = self.faults, self.faults.phases
        tags = tracker.tags(method, path, headers.get("x-request-id"))
        faults.count_phases(tags)
        scope["sim.phases"] = tags
        tracker.request_started()
        try:
            generation = method == "POST" and path.startswith("/v1/")
            rule = None if generation or not tags else faults.pick(tags)
            if rule is not None:
                if rule.kind == "http_error":
                    await _answer(send, *faults.error_body(rule, headers))
                    return
                if rule.kind == "reset":
                    faults._reset(scope)
                    return
                if rule.kind == "stall":
                    await asyncio.sleep(rule.stall_s)
                # stream_error / truncate: nothing to break in a plain answer
            await self.app(scope, receive, send)
        finally:
            tracker.request_ended(lambda delay, fn: asyncio.get_running_loop().call_later(delay, fn))


async def _answer(send: Any, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})
