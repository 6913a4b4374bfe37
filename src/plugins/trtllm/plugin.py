"""The ``trtllm`` engine kind: launch ``trtllm-serve`` as a child process group (or attach), read its
capacity from its iteration statistics and its gauges from ``/prometheus/metrics``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx

from infermatrix.plugin import (
    Capacity,
    EngineInfo,
    EngineTraits,
    LaunchedEngine,
    MetricNames,
    Recognition,
    ServerProbe,
    detect_hardware,
    expand_path,
    hookimpl,
    model_flags,
)
from infermatrix.plugins.trtllm.config import TrtllmEngineConfig
from infermatrix.plugins.trtllm.info import GENERATED, KV_USAGE, PROMPT, RUNNING, SPEC_ACCEPTED, SPEC_DRAFT, WAITING, trtllm_capacity

__all__ = ["TrtllmEngine", "TrtllmEngineConfig", "TRTLLM_TRAITS", "register_engines"]

REPOSITORY = "github.com/NVIDIA/TensorRT-LLM"
OPTIONS_FILE = "trtllm-config.yaml"

TRTLLM_TRAITS = EngineTraits(
    metrics=MetricNames(
        running=RUNNING, waiting=WAITING, kv_usage=KV_USAGE, generated_tokens=GENERATED, prompt_tokens=PROMPT,
        spec_draft_tokens=SPEC_DRAFT, spec_accepted_tokens=SPEC_ACCEPTED, path="/prometheus/metrics",
    ),
    tokenize=None,  # trtllm-serve has no tokenize endpoint: prompts are counted by the server's usage
    version_path="/version",
    per_chunk_usage=True,  # stream_options.continuous_usage_stats
    ignore_eos=True,
    prefix_cache_reset=None,  # no HTTP endpoint for it
    abort=None,  # a closed stream cancels its request
)


class TrtllmEngine(LaunchedEngine):
    traits = TRTLLM_TRAITS
    # Asked before any recogniser that reads /metrics: trtllm-serve's /metrics hands out its iteration
    # statistics once (each entry is removed when read), and read_capacity needs them.
    recognise_order = 20

    @classmethod
    async def recognise(cls, probe: ServerProbe) -> Recognition | None:
        """``/v1/models`` owned by ``tensorrt_llm``, or ``trtllm_`` gauges at ``/prometheus/metrics``;
        never ``/metrics`` (reading it consumes what it holds)."""
        found = []
        if "tensorrt_llm" in await probe.owned_by():
            found.append("/v1/models owned_by tensorrt_llm")
        if await probe.has_metrics("trtllm_", TRTLLM_TRAITS.metrics.path if TRTLLM_TRAITS.metrics else "/prometheus/metrics"):
            found.append("trtllm_ metrics")
        return Recognition(" + ".join(found)) if found else None

    def __init__(self, config: TrtllmEngineConfig, workdir: Path):
        super().__init__(config, workdir, host=config.host, port=config.port)
        self.config: TrtllmEngineConfig = config
        self.options_path = workdir / OPTIONS_FILE

    def command(self) -> list[str]:
        c = self.config
        argv = [expand_path(c.executable), expand_path(c.model_source or ""), "--host", c.host, "--port", str(self.port)]
        argv += model_flags(c.args, sep="_")
        argv += ["--config", str(self.options_path)]
        return argv + c.args.extra_args

    def env(self) -> dict[str, str]:
        return dict(self.config.env)

    async def start(self) -> None:
        if not self.attach:
            # YAML is a superset of JSON: the options file is written as JSON, which trtllm-serve's YAML loader reads.
            self.options_path.parent.mkdir(parents=True, exist_ok=True)
            self.options_path.write_text(json.dumps(self.config.options(), indent=2) + "\n")
        await super().start()

    async def describe(self, client: httpx.AsyncClient) -> EngineInfo:
        info = await super().describe(client)
        args = self.config.args
        info.extra.update(
            repository=REPOSITORY, attached=self.attach, model_source=self.config.model_source,
            **({} if self.attach else {"engine_args": args.model_dump(exclude_none=True, exclude={"extra_args"}), "llm_api_options": self.config.options()}),
        )
        if not self.attach:  # launched here: the hardware is this machine's
            info.hardware = await anyio.to_thread.run_sync(detect_hardware)
        return info

    async def read_capacity(self, client: httpx.AsyncClient) -> Capacity | None:
        stats: Any = None
        try:
            r = await client.get(f"{self.base_url}/metrics", headers=self.headers, timeout=10)
            if r.status_code == 200:
                stats = r.json()
        except (httpx.HTTPError, ValueError):
            stats = None
        return trtllm_capacity(stats, await self.metrics_page(client), self.config.args.max_batch_size)


@hookimpl
def register_engines(register: Any) -> None:
    register(TrtllmEngineConfig, TrtllmEngine)
