"""The sim's generation routes: /v1/completions and /v1/chat/completions, streamed (SSE) or whole.

A request becomes a ``Seq`` handed to the scheduler; the handler then relays what the scheduler pushes
to the sequence, and aborts it the moment the response ends, however it ends.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Callable

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from infermatrix.plugins.sim.api import ApiError, GenRequest, Shapes, parse_generation
from infermatrix.plugins.sim.faults import FaultState
from infermatrix.plugins.sim.profile import SimProfile
from infermatrix.plugins.sim.routes_info import error_response, json_response, read_body
from infermatrix.plugins.sim.scheduler import SHUTDOWN, Scheduler
from infermatrix.plugins.sim.seq import Seq
from infermatrix.plugins.sim.tasks import prompt_task_answer

__all__ = ["GenerationRoutes"]


class _SSE(StreamingResponse):
    """A streaming response that aborts its sequence the moment it ends, however it ends.

    Starlette cancels the body iterator when the client disconnects (it listens for
    ``http.disconnect`` beside the stream); ``on_close`` also covers a send that fails.
    """

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None]):
        super().__init__(content, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()


class GenerationRoutes:
    def __init__(self, profile: SimProfile, sched: Scheduler, faults: FaultState) -> None:
        self.profile = profile
        self.sched = sched
        self.faults = faults

    def routes(self) -> list[Route]:
        return [
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
        ]

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, "completions")

    async def chat(self, request: Request) -> Response:
        return await self._generate(request, "chat")

    async def _generate(self, request: Request, api: str) -> Response:
        profile, sched, faults = self.profile, self.sched, self.faults
        arrived = time.monotonic()  # before reading and tokenizing the body, as a client would count it
        try:
            raw = await read_body(request)
            received = time.monotonic()  # the whole request is here: a client that stalled mid-write is not server time
            req = parse_generation(raw, api, profile, request.headers.get("x-request-id"))
        except ApiError as exc:
            return error_response(exc)
        fault = faults.on_request(req.max_tokens, request.scope.get("sim.phases") or frozenset())
        if fault is not None and fault.kind == "http_error":
            status, body = faults.error_body(fault, request.headers)
            return Response(body, status_code=status, media_type="application/json")
        chat_api = api == "chat"
        seq = Seq(sched.new_id("chatcmpl" if chat_api else "cmpl"), api, req.prompt.tokens, req.prompt.blocks, req.max_tokens,
                  request_id=req.request_id, ignore_eos=req.ignore_eos, seed=req.seed, loop_marker=req.prompt.loop_marker,
                  reasoning=profile.reasoning_tokens if chat_api else 0)  # fmt: skip
        answer = prompt_task_answer(raw, api, req.ignore_eos)
        if answer is not None:
            seq.task = {"task_answer": answer}
        shapes = Shapes(seq.id, profile.model, chat_api, req.prompt.tokens)
        seq.received = received
        sched.submit(seq, arrived)
        if req.stream:
            def closed() -> None:
                if seq.state != "done":  # the client closed it (the window's end), not the engine
                    faults.phases.stream_closed_by_client()
                sched.abort(seq)

            return _SSE(faults.wrap_stream(fault, self._stream(seq, req, shapes), request.scope), closed)
        return await self._whole(request, seq, shapes)

    async def _stream(self, seq: Seq, req: GenRequest, shapes: Shapes) -> AsyncIterator[bytes]:
        cont = req.continuous_usage
        if shapes.chat:
            yield shapes.role_chunk(0 if cont else None)
        cum = 0
        chunks = 0
        gap = self.profile.usage_gap_every
        while True:
            buf: list[bytes] = []
            finished = False
            for item in await seq.items():  # everything since the last wake-up goes out in one write
                if item is SHUTDOWN:
                    if buf:
                        yield b"".join(buf)
                    return
                r, r_text, c, c_text, finish = item
                cum += r + c
                chunks += 1
                skip = gap and chunks % gap == 0 and finish is None  # a chunk without usage (usage_gap_every)
                buf.append(shapes.text_chunk(r_text, c_text, finish, cum if cont and not skip else None))
                if finish is not None:
                    finished = True
            if finished:
                if req.include_usage:
                    buf.append(shapes.usage_chunk(cum, min(seq.reasoning, cum)))
                buf.append(b"data: [DONE]\n\n")
                yield b"".join(buf)
                return
            yield b"".join(buf)

    async def _whole(self, request: Request, seq: Seq, shapes: Shapes) -> Response:
        sched = self.sched

        async def watch() -> None:  # the body is read: the next message is the disconnect
            while (await request.receive())["type"] != "http.disconnect":
                pass
            sched.abort(seq)
            seq.push(SHUTDOWN)

        watcher = asyncio.create_task(watch())
        reasoning: list[str] = []
        content: list[str] = []
        finish = None
        try:
            while finish is None:
                items = await seq.items()
                for item in items:
                    if item is SHUTDOWN:  # the client left (nobody reads this) or the server is stopping
                        return error_response(ApiError(503, "the server is shutting down", "ServiceUnavailableError"))
                    r, r_text, c, c_text, finish = item
                    reasoning.append(r_text)
                    content.append(c_text)
                    if finish is not None:
                        break
        finally:
            watcher.cancel()
            sched.abort(seq)  # no-op unless the handler itself was cancelled
        return json_response(shapes.whole("".join(reasoning), "".join(content), finish, seq.generated, self.profile.usage))
