"""The ``toy`` engine: an OpenAI-compatible server someone else runs, with its own metric names.

It imports only ``infermatrix.plugin`` (the public plugin API).
"""

from __future__ import annotations

from typing import Literal

import httpx
from pydantic import Field

from infermatrix.plugin import (
    AttachEngine,
    Capacity,
    EngineConfig,
    EngineTraits,
    MetricNames,
    TokenizeAPI,
    hookimpl,
    info_labels,
)

CAPACITY_METRIC = "toy:cache_config"


class ToyConfig(EngineConfig):
    """``[engine] kind = "toy"``. The Literal default names the kind; toy can only attach, so
    ``base_url`` is required here (the base class has it optional, for engines that launch)."""

    kind: Literal["toy"] = "toy"
    base_url: str = Field(..., description="where the toy server listens, e.g. http://127.0.0.1:8000")


class ToyEngine(AttachEngine):
    # What toy offers beyond the OpenAI API. Everything the runner knows about toy is here.
    traits = EngineTraits(
        metrics=MetricNames(
            running="toy:running",  # requests running now: steady state, admission limits
            waiting="toy:waiting",  # requests queued
            generated_tokens="toy:generated_tokens",  # a counter: engine-side token reconciliation
        ),
        tokenize=TokenizeAPI(path="/tokenize"),  # {"model", "prompt"} -> {"count"}: exact prompt lengths
        per_chunk_usage=True,  # every chunk can carry cumulative usage (stream_options.continuous_usage_stats)
        ignore_eos=True,  # requests may say ignore_eos, so every request runs to max_tokens
    )

    async def read_capacity(self, client: httpx.AsyncClient) -> Capacity | None:
        """Toy publishes its KV cache as labels of one metric: blocks x block size."""
        labels = info_labels(await self.metrics_page(client), CAPACITY_METRIC)
        try:
            blocks, block_size = int(labels["num_gpu_blocks"]), int(labels["block_size"])
        except (KeyError, ValueError):
            return None  # unknown: infermatrix treats it as unlimited, and says so
        return Capacity(kv_tokens=blocks * block_size, source=f"{CAPACITY_METRIC} ({blocks} blocks × {block_size})")


@hookimpl
def register_engines(register):
    register(ToyConfig, ToyEngine)
