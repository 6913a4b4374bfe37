"""The sim's HTTP server: starlette routes over the engine model, served by uvicorn.

Run it alone with ``python -m infermatrix.plugins.sim.server --profile tiny --port 8000``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from typing import Any, AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware

from infermatrix.plugins.sim import tokenizer as tok
from infermatrix.plugins.sim.faults import AuthGuard, FaultState
from infermatrix.plugins.sim.profile import SimArgs, SimProfile, load_profile, with_engine_args
from infermatrix.plugins.sim.routes_generate import GenerationRoutes
from infermatrix.plugins.sim.routes_info import InfoRoutes
from infermatrix.plugins.sim.scheduler import Scheduler

__all__ = ["create_app", "serve", "main"]


def create_app(profile: SimProfile) -> Starlette:
    """The sim's ASGI app: one scheduler and fault state shared by the info and generation routes."""
    tok.use_tokenizer_file(profile.tokenizer_file)
    sched = Scheduler(profile)
    faults = FaultState(profile.faults)  # fault injection and the API key: every hook is a `faults.` call

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sched.start()
        faults.start()
        try:
            yield
        finally:
            await sched.stop()

    routes = [*InfoRoutes(profile, sched, faults).routes(), *GenerationRoutes(profile, sched, faults).routes()]
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
    for name in SimArgs.model_fields:  # vLLM's flag names for what the sim models (profile.SimArgs)
        ap.add_argument("--" + name.replace("_", "-"), dest=name, default=None, type=json.loads if name == "speculative_config" else int)
    args = ap.parse_args(argv)
    try:
        engine_args = SimArgs(**{k: getattr(args, k) for k in SimArgs.model_fields})
        profile = with_engine_args(load_profile(args.profile), engine_args)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    serve(profile, args.host, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
