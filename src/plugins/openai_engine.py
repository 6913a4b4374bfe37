"""``openai``: attach to any OpenAI-compatible server by ``base_url`` (nothing is launched)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from infermatrix.core.config import EngineConfig
from infermatrix.core.engine import Engine
from infermatrix.core.hookspecs import hookimpl


class OpenAIEngineConfig(EngineConfig):
    kind: Literal["openai"] = "openai"
    base_url: str = Field(..., description="the server's address, e.g. http://127.0.0.1:8000")


class OpenAIEngine(Engine):
    kind = "openai"


@hookimpl
def register_engines(register):
    register(OpenAIEngineConfig)


@hookimpl
def launch_engine(config: EngineConfig, workdir: Path) -> Engine | None:
    return OpenAIEngine(config, workdir) if config.kind == "openai" else None
