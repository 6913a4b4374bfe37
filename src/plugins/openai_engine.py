"""``openai``: attach to any OpenAI-compatible server by ``base_url`` (nothing is launched).

It asks only for what the OpenAI API defines (plus ``stream_options.include_usage``): no engine metrics,
no body extensions. It does try a ``/tokenize`` endpoint for counting prompts, since many servers
have one and the fallback (a real prefill per count) is slow; a server without it is fine.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from infermatrix.plugin import AttachEngine, EngineConfig, EngineTraits, TokenizeAPI, hookimpl

__all__ = ["OpenAIEngineConfig", "OpenAIEngine", "register_engines"]


class OpenAIEngineConfig(EngineConfig):
    kind: Literal["openai"] = "openai"
    base_url: str = Field(..., description="the server's address, e.g. http://127.0.0.1:8000")


class OpenAIEngine(AttachEngine):
    traits = EngineTraits(tokenize=TokenizeAPI())


@hookimpl
def register_engines(register) -> None:
    register(OpenAIEngineConfig, OpenAIEngine)
