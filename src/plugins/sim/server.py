"""The sim's HTTP server: starlette routes over the engine model, served by uvicorn.

Run it alone with ``python -m infermatrix.plugins.sim.server --profile tiny --port 8000``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import signal
import sys
import time
from collections import Counter
from typing import Any, AsyncIterator, Callable

import orjson
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from infermatrix import __version__
from infermatrix.plugins.sim import tokenizer as tok
from infermatrix.plugins.sim.api import ApiError, GenRequest, Shapes, check_messages, check_model, parse_generation
from infermatrix.plugins.sim.faults import AuthGuard, FaultState, SimFaults
from infermatrix.plugins.sim.metrics import CONTENT_TYPE, render_metrics
from infermatrix.plugins.sim.profile import SimProfile, load_profile
from infermatrix.plugins.sim.record import window_record
from infermatrix.plugins.sim.scheduler import SHUTDOWN, Scheduler
from infermatrix.plugins.sim.seq import Seq

__all__ = ["create_app", "serve", "main"]


def _json(obj: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json")


def _error(exc: ApiError) -> Response:
    return Response(exc.body(), status_code=exc.status, media_type="application/json")


async def _body(request: Request) -> Any:
    raw = await request.body()
    try:
        return orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from None


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


def create_app(profile: SimProfile) -> Starlette:
    tok.use_tokenizer_file(profile.tokenizer_file)
    sched = Scheduler(profile)
    faults = FaultState(profile.faults)  # fault injection and the API key: every hook is a `faults.` call
    model_entry = {"id": profile.model, "object": "model", "created": 0, "owned_by": "infermatrix-sim",
                   "root": profile.model, "parent": None, "max_model_len": profile.max_model_len}  # fmt: skip

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sched.start()
        faults.start()
        try:
            yield
        finally:
            await sched.stop()

    async def health(request: Request) -> Response:
        return Response(status_code=faults.health_status())

    async def version(request: Request) -> Response:
        return _json({"version": f"infermatrix-sim {__version__}"})

    async def models(request: Request) -> Response:
        return _json({"object": "list", "data": [model_entry]})

    # Every /tokenize call by what it counted (prompt text or output text, ``add_special_tokens: false``): the
    # harness's tokenizer traffic, server-side (GET /debug/tokenize; tests check that no text is counted twice).
    tokenized: Counter[tuple[str, str]] = Counter()

    async def tokenize(request: Request) -> Response:
        try:
            body = await _body(request)
            if not isinstance(body, dict):
                raise ApiError(400, "the request body must be a JSON object")
            check_model(body, profile)
            if "messages" in body:
                pieces = tok.chat_tokens(check_messages(body["messages"]))
            elif isinstance(body.get("prompt"), str):
                pieces = tok.split(body["prompt"])
            else:
                raise ApiError(400, "give prompt (a string) or messages", param="prompt")
        except ApiError as exc:
            return _error(exc)
        ids = [tok.token_id(p) for p in pieces]
        kind = "output" if body.get("add_special_tokens") is False else "prompt"
        tokenized[(kind, hashlib.blake2b(orjson.dumps(body.get("messages") or body.get("prompt")), digest_size=16).hexdigest())] += 1
        return _json({"count": len(ids), "max_model_len": profile.max_model_len, "tokens": ids, "token_strs": None})

    async def metrics(request: Request) -> Response:
        if not profile.metrics:
            return Response(b"Not Found", status_code=404, media_type="text/plain")
        page = render_metrics(sched)
        faults.phases.metrics_answered(sched.n_admitted, len(sched.waiting))
        return Response(page, media_type=CONTENT_TYPE)

    async def truth(request: Request) -> Response:
        since = request.query_params.get("since")
        try:
            since_f = float(since) if since is not None else None
        except ValueError:
            return _error(ApiError(400, "since must be a number (time.monotonic() seconds)", param="since"))
        return _json(sched.truth(since_f))

    async def window(request: Request) -> Response:  # the engine's own record of [start, end] (record.py)
        try:
            start, end = float(request.query_params["start"]), float(request.query_params["end"])
        except (KeyError, ValueError):
            return _error(ApiError(400, "give start and end (time.monotonic() seconds)", param="start"))
        return _json(window_record(sched, start, end))

    async def reset(request: Request) -> Response:
        sched.reset(cache=request.query_params.get("cache") in ("1", "true", "yes"))
        return _json({"ok": True})

    async def reset_prefix_cache(request: Request) -> Response:  # vLLM's endpoint (its dev mode)
        sched.reset_prefix_cache()
        return _json({"ok": True})

    async def abort_request(request: Request) -> Response:  # SGLang's shape: {"abort_all": true}
        try:
            body = await _body(request)
        except ApiError as exc:
            return _error(exc)
        if not (isinstance(body, dict) and body.get("abort_all") is True):
            return _error(ApiError(400, "only {\"abort_all\": true} is supported", param="abort_all"))
        return _json({"ok": True, "aborted": sched.abort_all()})

    async def tokenize_info(request: Request) -> Response:
        out: dict[str, Any] = {}
        for kind in ("prompt", "output"):
            counts = [n for (k, _), n in tokenized.items() if k == kind]
            out[kind] = {"calls": sum(counts), "distinct_texts": len(counts), "most_per_text": max(counts, default=0)}
        return _json(out)

    async def profile_info(request: Request) -> Response:
        return _json(profile.model_dump(mode="json"))

    async def fault_info(request: Request) -> Response:
        """GET: what the faults did so far; POST: new faults (a SimFaults table), counts from zero."""
        if request.method == "POST":
            from pydantic import ValidationError

            try:
                faults.configure(SimFaults.model_validate(await _body(request)))
            except (ApiError, ValidationError) as exc:
                return _error(exc if isinstance(exc, ApiError) else ApiError(400, str(exc).splitlines()[0]))
        return _json({"hits": faults.hits, "phase_counts": faults.phase_counts, "stage": faults.phases.stage,
                      "generation_requests": faults.requests})  # fmt: skip

    async def completions(request: Request) -> Response:
        return await _generate(request, "completions")

    async def chat(request: Request) -> Response:
        return await _generate(request, "chat")

    async def _generate(request: Request, api: str) -> Response:
        arrived = time.monotonic()  # before reading and tokenizing the body, as a client would count it
        try:
            raw = await _body(request)
            received = time.monotonic()  # the whole request is here: a client that stalled mid-write is not server time
            req = parse_generation(raw, api, profile, request.headers.get("x-request-id"))
        except ApiError as exc:
            return _error(exc)
        fault = faults.on_request(req.max_tokens, request.scope.get("sim.phases") or frozenset())
        if fault is not None and fault.kind == "http_error":
            status, body = faults.error_body(fault, request.headers)
            return Response(body, status_code=status, media_type="application/json")
        chat_api = api == "chat"
        seq = Seq(sched.new_id("chatcmpl" if chat_api else "cmpl"), api, req.prompt.tokens, req.prompt.blocks, req.max_tokens,
                  request_id=req.request_id, ignore_eos=req.ignore_eos, seed=req.seed, loop_marker=req.prompt.loop_marker,
                  reasoning=profile.reasoning_tokens if chat_api else 0)  # fmt: skip
        shapes = Shapes(seq.id, profile.model, chat_api, req.prompt.tokens)
        seq.received = received
        sched.submit(seq, arrived)
        if req.stream:
            def closed() -> None:
                if seq.state != "done":  # the client closed it (the window's end), not the engine
                    faults.phases.stream_closed_by_client()
                sched.abort(seq)

            return _SSE(faults.wrap_stream(fault, _stream(seq, req, shapes), request.scope), closed)
        return await _whole(request, seq, shapes)

    async def _stream(seq: Seq, req: GenRequest, shapes: Shapes) -> AsyncIterator[bytes]:
        cont = req.continuous_usage
        if shapes.chat:
            yield shapes.role_chunk(0 if cont else None)
        cum = 0
        chunks = 0
        gap = profile.usage_gap_every
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
                    buf.append(shapes.usage_chunk(cum))
                buf.append(b"data: [DONE]\n\n")
                yield b"".join(buf)
                return
            yield b"".join(buf)

    async def _whole(request: Request, seq: Seq, shapes: Shapes) -> Response:
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
                        return _error(ApiError(503, "the server is shutting down", "ServiceUnavailableError"))
                    r, r_text, c, c_text, finish = item
                    reasoning.append(r_text)
                    content.append(c_text)
                    if finish is not None:
                        break
        finally:
            watcher.cancel()
            sched.abort(seq)  # no-op unless the handler itself was cancelled
        return _json(shapes.whole("".join(reasoning), "".join(content), finish, seq.generated, profile.usage))

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/version", version, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        *([Route("/tokenize", tokenize, methods=["POST"])] if profile.tokenize else []),  # off: as servers without one
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/reset_prefix_cache", reset_prefix_cache, methods=["POST"]),
        Route("/abort_request", abort_request, methods=["POST"]),
        Route("/debug/truth", truth, methods=["GET"]),
        Route("/debug/window", window, methods=["GET"]),
        Route("/debug/reset", reset, methods=["POST"]),
        Route("/debug/profile", profile_info, methods=["GET"]),
        Route("/debug/tokenize", tokenize_info, methods=["GET"]),
        Route("/debug/faults", fault_info, methods=["GET", "POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(AuthGuard, faults=faults)])
    app.state.scheduler = sched
    app.state.faults = faults
    app.state.profile = profile
    return app


class _Stop(Exception):
    """SIGTERM, re-raised by uvicorn after its shutdown, turned into a normal return."""


def _raise_stop(signum: int, frame: Any) -> None:
    raise _Stop()


def serve(profile: SimProfile, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve ``profile`` until SIGINT/SIGTERM, then return (open streams are ended, without ``[DONE]``)."""
    import uvicorn

    app = create_app(profile)
    sched: Scheduler = app.state.scheduler
    faults: FaultState = app.state.faults

    class _Server(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            faults.slow_shutdown()
            # End open streams first, so uvicorn's graceful wait is short and nothing gets cancelled mid-send.
            sched.end_all()
            await super().shutdown(sockets)

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on",
                            ws="none", timeout_graceful_shutdown=2, backlog=4096)  # fmt: skip
    # uvicorn re-raises the signal that stopped it once it has shut down; make both a plain return.
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        server = _Server(config)
        faults.connections = lambda: server.server_state.connections  # for injected connection resets
        server.run()
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    from infermatrix.plugin import ConfigError

    ap = argparse.ArgumentParser(prog="python -m infermatrix.plugins.sim.server", description="Serve a simulated engine.")
    ap.add_argument("--profile", default="demo", help="built-in name, or a .toml/.json profile file")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    args = ap.parse_args(argv)
    try:
        profile = load_profile(args.profile)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    serve(profile, args.host, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
