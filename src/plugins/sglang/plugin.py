"""The ``sglang`` engine kind: launch ``python -m sglang.launch_server`` as a child process group (or
attach), ask ``/get_server_info`` what it is and how much it holds, read its gauges from ``/metrics``."""

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
from infermatrix.plugins.sglang.config import SERVER_MODULE, SglangEngineConfig
from infermatrix.plugins.sglang.info import (
    CACHED,
    GENERATED,
    PROMPT,
    RUNNING,
    TOKEN_USAGE,
    WAITING,
    describe_server_info,
    sglang_capacity,
    sglang_gauges,
)

__all__ = ["SglangEngine", "SglangEngineConfig", "SGLANG_TRAITS", "INFO_PATHS", "register_engines"]

REPOSITORY = "github.com/sgl-project/sglang"
# Older builds answer the first, newer ones the second (the first then logs a deprecation warning or is gone).
INFO_PATHS = ("/get_server_info", "/server_info")

SGLANG_TRAITS = EngineTraits(
    # Gauges are per data-parallel rank: sglang_gauges sums requests and averages KV usage over ranks.
    metrics=MetricNames(running=RUNNING, waiting=WAITING, kv_usage=TOKEN_USAGE, generated_tokens=GENERATED, prompt_tokens=PROMPT,
                        prefix_cache_queries=PROMPT, prefix_cache_hits=CACHED, parse=sglang_gauges),
    # {"model", "prompt", "add_special_tokens"} -> {"tokens", "count", "max_model_len"}. Only newer builds take
    # "messages", so chat prompts are counted by the server's usage instead.
    tokenize=TokenizeAPI(path="/v1/tokenize", chat=False),
    version_path=None,  # the version is a field of /get_server_info
    per_chunk_usage=True,  # stream_options.continuous_usage_stats
    ignore_eos=True,
    prefix_cache_reset=HttpCall("POST", "/flush_cache"),  # answers 400 while requests run
    abort=HttpCall("POST", "/abort_request", {"abort_all": True}),
)


class SglangEngine(LaunchedEngine):
    traits = SGLANG_TRAITS
    recognise_order = 30

    @classmethod
    async def recognise(cls, probe: ServerProbe) -> Recognition | None:
        """Its server-info endpoint (server arguments + scheduler numbers), else ``sglang:`` metrics."""
        for path in INFO_PATHS:
            data = await probe.json(path)
            if isinstance(data, dict) and "model_path" in data and ("max_total_num_tokens" in data or "internal_states" in data):
                return Recognition(path, {"version": data.get("version")})
        return Recognition("sglang: metrics") if await probe.has_metrics("sglang:") else None

    def __init__(self, config: SglangEngineConfig, workdir: Path):
        super().__init__(config, workdir, host=config.host, port=config.port)
        self.config: SglangEngineConfig = config

    def command(self) -> list[str]:
        c = self.config
        source = expand_path(c.model_source or "")
        if c.executable:
            argv = [expand_path(c.executable), "serve", "--model-path", source]
        else:
            argv = [expand_path(c.python or "python3"), "-m", SERVER_MODULE, "--model-path", source]
        if c.model:
            argv += ["--served-model-name", c.model]
        argv += ["--host", c.host, "--port", str(self.port)]
        if self.api_key:
            argv += ["--api-key", self.api_key]
        argv += model_flags(c.args)
        if c.enable_metrics:
            argv.append("--enable-metrics")
        return argv + c.args.extra_args

    def env(self) -> dict[str, str]:
        return dict(self.config.env)

    async def server_info(self, client: httpx.AsyncClient) -> dict[str, Any] | None:
        """``/get_server_info``, else ``/server_info``; ``None`` when neither answers with an object."""
        for path in INFO_PATHS:
            try:
                r = await client.get(f"{self.base_url}{path}", headers=self.headers, timeout=10)
            except httpx.HTTPError:
                return None
            if r.status_code != 200:
                continue
            try:
                data = r.json()
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
        return None

    async def describe(self, client: httpx.AsyncClient) -> EngineInfo:
        info = await super().describe(client)
        data = await self.server_info(client)
        if data is not None:
            info.version = info.version or (str(data["version"]) if data.get("version") else None)
            info.extra.update(describe_server_info(data))
        info.extra.update(repository=REPOSITORY, attached=self.attach, model_source=self.config.model_source)
        if not self.attach:  # launched here: the hardware is this machine's
            info.hardware = await anyio.to_thread.run_sync(detect_hardware)
        return info

    async def read_capacity(self, client: httpx.AsyncClient) -> Capacity | None:
        data = await self.server_info(client)
        cap = sglang_capacity(data) if data is not None else None
        limit = self.config.args.max_running_requests
        if cap is None and limit:
            return Capacity(kv_tokens=None, max_seqs=limit, source=f"max_running_requests {limit} (--max-running-requests); KV budget unknown")
        return cap


@hookimpl
def register_engines(register: Any) -> None:
    register(SglangEngineConfig, SglangEngine)
