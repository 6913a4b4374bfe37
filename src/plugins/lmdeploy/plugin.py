"""The ``lmdeploy`` engine kind: launch ``lmdeploy serve api_server`` as a child process group (or
attach), read its KV geometry from ``/distserve/engine_info`` and its gauges from ``/metrics``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx

from infermatrix.plugin import (
    Capacity,
    EngineInfo,
    EngineTraits,
    HttpCall,
    LaunchedEngine,
    MetricNames,
    Recognition,
    ServerProbe,
    TokenizeAPI,
    detect_hardware,
    expand_path,
    hookimpl,
    model_flags,
)
from infermatrix.plugins.lmdeploy.config import LmdeployEngineConfig
from infermatrix.plugins.lmdeploy.info import GENERATED, KV_USAGE, PROMPT, RUNNING, WAITING, engine_info, lmdeploy_capacity

__all__ = ["LmdeployEngine", "LmdeployEngineConfig", "LMDEPLOY_TRAITS", "register_engines"]

REPOSITORY = "github.com/InternLM/lmdeploy"
ENGINE_INFO = "/distserve/engine_info"

LMDEPLOY_TRAITS = EngineTraits(
    # Labelled per engine (data-parallel rank); one server process runs one rank, so sums are its own values.
    metrics=MetricNames(running=RUNNING, waiting=WAITING, kv_usage=KV_USAGE, generated_tokens=GENERATED, prompt_tokens=PROMPT),
    # POST /v1/encode {"input", "add_bos"} -> {"input_ids", "length"}; it takes no messages, so chat
    # prompts are counted by the server's usage.
    tokenize=TokenizeAPI(path="/v1/encode", text_field="input", send_model=False, chat=False,
                         special_tokens_field="add_bos", count_field="length", tokens_field="input_ids"),
    version_path=None,  # no version endpoint
    per_chunk_usage=False,  # stream_options has include_usage only: tokens are recounted per chunk
    ignore_eos=True,
    prefix_cache_reset=None,  # no HTTP endpoint for it
    abort=HttpCall("POST", "/abort_request", {"abort_all": True}),  # 501 unless --enable-abort-handling
)


class LmdeployEngine(LaunchedEngine):
    traits = LMDEPLOY_TRAITS
    recognise_order = 40

    @classmethod
    async def recognise(cls, probe: ServerProbe) -> Recognition | None:
        """Its ``/distserve/engine_info`` (KV geometry), else ``lmdeploy:`` metrics."""
        info = engine_info(await probe.json(ENGINE_INFO))
        if info is not None and ("num_gpu_blocks" in info or "block_size" in info):
            return Recognition(ENGINE_INFO)
        return Recognition("lmdeploy: metrics") if await probe.has_metrics("lmdeploy:") else None

    def __init__(self, config: LmdeployEngineConfig, workdir: Path):
        super().__init__(config, workdir, host=config.host, port=config.port)
        self.config: LmdeployEngineConfig = config

    def command(self) -> list[str]:
        c = self.config
        argv = [expand_path(c.executable), "serve", "api_server", expand_path(c.model_source or "")]
        argv += ["--server-name", c.host, "--server-port", str(self.port)]
        if c.model:
            argv += ["--model-name", c.model]
        if self.api_key:
            argv += ["--api-keys", self.api_key]
        argv += model_flags(c.args)
        if c.enable_metrics:
            argv.append("--enable-metrics")
        return argv + c.args.extra_args

    def env(self) -> dict[str, str]:
        return dict(self.config.env)

    async def engine_info(self, client: httpx.AsyncClient) -> dict[str, Any] | None:
        try:
            r = await client.get(f"{self.base_url}{ENGINE_INFO}", headers=self.headers, timeout=10)
            return engine_info(r.json()) if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    async def describe(self, client: httpx.AsyncClient) -> EngineInfo:
        info = await super().describe(client)
        found = await self.engine_info(client)
        info.extra.update(repository=REPOSITORY, attached=self.attach, model_source=self.config.model_source, engine_info=found)
        if not self.attach:
            info.extra["engine_args"] = self.config.args.model_dump(exclude_none=True, exclude={"extra_args"})
            info.hardware = await anyio.to_thread.run_sync(detect_hardware)
        return info

    async def read_capacity(self, client: httpx.AsyncClient) -> Capacity | None:
        return lmdeploy_capacity(await self.engine_info(client), self.config.args.max_batch_size)


@hookimpl
def register_engines(register: Any) -> None:
    register(LmdeployEngineConfig, LmdeployEngine)
