"""The sim's routes that describe it: health, version, models, /tokenize, /metrics and the /debug record.

Each handler is a method of ``InfoRoutes``, which holds what they share (the profile, the scheduler, the
fault state and the /tokenize ledger); ``create_app`` in server.py mounts ``InfoRoutes.routes()``.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections import Counter
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from infermatrix import __version__
from infermatrix.plugins.sim import tokenizer as tok
from infermatrix.plugins.sim.api import ApiError, check_messages, check_model
from infermatrix.plugins.sim.faults import FaultState, SimFaults
from infermatrix.plugins.sim.metrics import CONTENT_TYPE, render_metrics
from infermatrix.plugins.sim.profile import SimProfile
from infermatrix.plugins.sim.record import window_record
from infermatrix.plugins.sim.scheduler import Scheduler

# How often GET /debug/wait looks at the record, on the sim's own loop: a request runs for many of these (a step is
# milliseconds), so one cannot begin and end unseen however busy the host — the loop that runs the steps runs the look.
WAIT_TICK_S = 0.002

__all__ = ["InfoRoutes", "json_response", "error_response", "read_body"]


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type="application/json")


def error_response(exc: ApiError) -> Response:
    return Response(exc.body(), status_code=exc.status, media_type="application/json")


async def read_body(request: Request) -> Any:
    raw = await request.body()
    try:
        return orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from None


class InfoRoutes:
    def __init__(self, profile: SimProfile, sched: Scheduler, faults: FaultState) -> None:
        self.profile = profile
        self.sched = sched
        self.faults = faults
        self.model_entry = {"id": profile.model, "object": "model", "created": 0, "owned_by": "infermatrix-sim",
                            "root": profile.model, "parent": None, "max_model_len": profile.max_model_len}  # fmt: skip
        # Every /tokenize call by what it counted (prompt text or output text, ``add_special_tokens: false``): the
        # harness's tokenizer traffic, server-side (GET /debug/tokenize; tests check that no text is counted twice).
        self.tokenized: Counter[tuple[str, str]] = Counter()

    def routes(self) -> list[Route]:
        return [
            Route("/health", self.health, methods=["GET"]),
            Route("/version", self.version, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            *([Route("/tokenize", self.tokenize, methods=["POST"])] if self.profile.tokenize else []),  # off: as servers without one
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/reset_prefix_cache", self.reset_prefix_cache, methods=["POST"]),
            Route("/abort_request", self.abort_request, methods=["POST"]),
            Route("/debug/truth", self.truth, methods=["GET"]),
            Route("/debug/window", self.window, methods=["GET"]),
            Route("/debug/wait", self.wait, methods=["GET"]),
            Route("/debug/reset", self.reset, methods=["POST"]),
            Route("/debug/profile", self.profile_info, methods=["GET"]),
            Route("/debug/tokenize", self.tokenize_info, methods=["GET"]),
            Route("/debug/faults", self.fault_info, methods=["GET", "POST"]),
        ]

    async def health(self, request: Request) -> Response:
        return Response(status_code=self.faults.health_status())

    async def version(self, request: Request) -> Response:
        return json_response({"version": f"infermatrix-sim {__version__}"})

    async def models(self, request: Request) -> Response:
        return json_response({"object": "list", "data": [self.model_entry]})

    async def tokenize(self, request: Request) -> Response:
        try:
            body = await read_body(request)
            if not isinstance(body, dict):
                raise ApiError(400, "the request body must be a JSON object")
            check_model(body, self.profile)
            if "messages" in body:
                pieces = tok.chat_tokens(check_messages(body["messages"]))
            elif isinstance(body.get("prompt"), str):
                pieces = tok.split(body["prompt"])
            else:
                raise ApiError(400, "give prompt (a string) or messages", param="prompt")
        except ApiError as exc:
            return error_response(exc)
        ids = [tok.token_id(p) for p in pieces]
        kind = "output" if body.get("add_special_tokens") is False else "prompt"
        text_hash = hashlib.blake2b(orjson.dumps(body.get("messages") or body.get("prompt")), digest_size=16).hexdigest()
        self.tokenized[(kind, text_hash)] += 1
        return json_response({"count": len(ids), "max_model_len": self.profile.max_model_len, "tokens": ids, "token_strs": None})

    async def metrics(self, request: Request) -> Response:
        if not self.profile.metrics:
            return Response(b"Not Found", status_code=404, media_type="text/plain")
        page = render_metrics(self.sched)
        self.faults.phases.metrics_answered(self.sched.n_admitted, len(self.sched.waiting))
        return Response(page, media_type=CONTENT_TYPE)

    async def truth(self, request: Request) -> Response:
        since = request.query_params.get("since")
        try:
            since_f = float(since) if since is not None else None
        except ValueError:
            return error_response(ApiError(400, "since must be a number (time.monotonic() seconds)", param="since"))
        return json_response(self.sched.truth(since_f, blocks=request.query_params.get("blocks") in ("1", "true")))

    async def wait(self, request: Request) -> Response:
        """``GET /debug/wait?unfinished=RE[&prefilling=1][&timeout=T]``: answers once a request whose X-Request-Id
        matches the regular expression ``RE`` (searched, so a plain part of an id will do) has been received and has
        not finished — with ``prefilling``, nor sent its first token — with its id, its receipt and the time (the
        monotonic clock of /debug/truth); 408 after ``T`` seconds (60 by default). An event a test acts on mid-request
        (docs/sim.md), where polling /debug/truth from a busy client can miss a request that runs a fraction of a second."""
        raw = request.query_params.get("unfinished")
        if raw is None:
            return error_response(ApiError(400, "give unfinished=<a regular expression an X-Request-Id matches>", param="unfinished"))
        try:
            pattern = re.compile(raw)
        except re.error as exc:
            return error_response(ApiError(400, f"not a regular expression: {exc}", param="unfinished"))
        try:
            timeout = float(request.query_params.get("timeout", "60"))
        except ValueError:
            return error_response(ApiError(400, "timeout must be a number of seconds", param="timeout"))
        prefilling = request.query_params.get("prefilling") in ("1", "true")
        deadline = time.monotonic() + timeout
        while True:
            found = next((s for s in self.sched.records if s.received is not None and s.finished is None
                          and not (prefilling and s.first_token is not None) and pattern.search(s.request_id or "")), None)  # fmt: skip
            if found is not None:
                return json_response({"request_id": found.request_id, "received": found.received, "t": time.monotonic()})
            if time.monotonic() >= deadline:
                return error_response(ApiError(408, f"no unfinished request matching {pattern.pattern!r} in {timeout:g} s", "TimeoutError", "unfinished"))
            await asyncio.sleep(WAIT_TICK_S)

    async def window(self, request: Request) -> Response:  # the engine's own record of [start, end] (record.py)
        try:
            start, end = float(request.query_params["start"]), float(request.query_params["end"])
        except (KeyError, ValueError):
            return error_response(ApiError(400, "give start and end (time.monotonic() seconds)", param="start"))
        return json_response(window_record(self.sched, start, end))

    async def reset(self, request: Request) -> Response:
        self.sched.reset(cache=request.query_params.get("cache") in ("1", "true", "yes"))
        return json_response({"ok": True})

    async def reset_prefix_cache(self, request: Request) -> Response:  # vLLM's endpoint (its dev mode)
        self.sched.reset_prefix_cache()
        return json_response({"ok": True})

    async def abort_request(self, request: Request) -> Response:  # SGLang's shape: {"abort_all": true}
        try:
            body = await read_body(request)
        except ApiError as exc:
            return error_response(exc)
        if not (isinstance(body, dict) and body.get("abort_all") is True):
            return error_response(ApiError(400, "only {\"abort_all\": true} is supported", param="abort_all"))
        return json_response({"ok": True, "aborted": self.sched.abort_all()})

    async def tokenize_info(self, request: Request) -> Response:
        out: dict[str, Any] = {}
        for kind in ("prompt", "output"):
            counts = [n for (k, _), n in self.tokenized.items() if k == kind]
            out[kind] = {"calls": sum(counts), "distinct_texts": len(counts), "most_per_text": max(counts, default=0)}
        return json_response(out)

    async def profile_info(self, request: Request) -> Response:
        return json_response(self.profile.model_dump(mode="json"))

    async def fault_info(self, request: Request) -> Response:
        """GET: what the faults did so far; POST: new faults (a SimFaults table), counts from zero."""
        faults = self.faults
        if request.method == "POST":
            from pydantic import ValidationError

            try:
                faults.configure(SimFaults.model_validate(await read_body(request)))
            except (ApiError, ValidationError) as exc:
                return error_response(exc if isinstance(exc, ApiError) else ApiError(400, str(exc).splitlines()[0]))
        return json_response({"hits": faults.hits, "phase_counts": faults.phase_counts, "stage": faults.phases.stage,
                              "generation_requests": faults.requests})  # fmt: skip
