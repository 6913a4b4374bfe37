"""Build an engine from an ``[engine]`` table, as the runner does, and drive its async methods."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar

import anyio
import httpx

from infermatrix.core.registry import validate_config
from infermatrix.testing import plugin_manager
from infermatrix.core.registry import build_engine

T = TypeVar("T")


def engine_for(workdir: Path, **table: Any):
    pm = plugin_manager()
    cfg = validate_config(pm, {"engine": table}, "test")
    engine = build_engine(pm, cfg.engine, workdir)
    assert engine is not None and engine.kind == table["kind"]
    return engine


def run_with_client(fn: Callable[[httpx.AsyncClient], Awaitable[T]]) -> T:
    async def main() -> T:
        async with httpx.AsyncClient() as client:
            return await fn(client)

    return anyio.run(main)
