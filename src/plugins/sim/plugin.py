"""The ``sim`` engine kind: launches the simulated server as a child process (or attaches to one),
and the ``infermatrix sim serve`` command.

Imports stay light (no server stack) because every CLI start loads this module.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import Field, field_validator, model_validator

from infermatrix.plugin import (
    Capacity,
    ConfigError,
    EngineConfig,
    EngineInfo,
    EngineTraits,
    HttpCall,
    LaunchedEngine,
    MetricNames,
    Recognition,
    ServerProbe,
    TokenizeAPI,
    hookimpl,
    info_labels,
    model_flags,
)
from infermatrix.plugins.sim.profile import SimArgs, SimProfile, load_profile, with_engine_args

__all__ = ["SimEngineConfig", "SimEngine", "sim_traits", "register_engines", "register_commands"]


class SimEngineConfig(EngineConfig):
    kind: Literal["sim"] = "sim"
    profile: str | dict[str, Any] = Field("demo", description="built-in profile name, a TOML/JSON path, or an inline table")
    host: str = "127.0.0.1"
    args: SimArgs = Field(default_factory=SimArgs, description="vLLM's flags for what the sim models, over the profile's values")

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, v: str | dict[str, Any]) -> str | dict[str, Any]:
        try:  # fail at config time, with the config's field name, not at launch
            load_profile(v)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return v

    @model_validator(mode="after")
    def _args_launch_only(self) -> SimEngineConfig:
        if self.base_url and self.args.model_dump(exclude_defaults=True):  # a stored config round-trips every field: set is not enough
            raise ValueError("engine.args: only for a sim infermatrix launches (an attached server runs its own)")
        return self

    def known_max_model_len(self) -> int | None:
        """Known before launch: the config's ``max_model_len``, else the profile's (not when attaching:
        the running server's profile is then the truth, and only it can tell)."""
        if self.max_model_len is not None or self.base_url:
            return self.max_model_len
        return self.launch_profile().max_model_len

    def launch_profile(self) -> SimProfile:
        """The profile a launched server runs: the config's profile with its ``args`` in place (unchecked: the
        server itself refuses a combination it cannot run, as vLLM does)."""
        return with_engine_args(load_profile(self.profile), self.args, check=False)


    def known_capacity(self) -> tuple[int | None, int | None, str] | None:
        """The config's overrides, else the profile's KV budget and max sequences (not when attaching)."""
        if self.base_url:
            return super().known_capacity()
        profile = self.launch_profile()
        return (self.kv_tokens if self.kv_tokens is not None else profile.kv_tokens,
                self.max_seqs if self.max_seqs is not None else profile.max_num_seqs, "sim profile")  # fmt: skip


def sim_traits(profile: SimProfile) -> EngineTraits:
    """What a sim server with ``profile`` offers: vLLM's API extensions, its metrics under the profile's names."""
    f = profile.metric_family
    metrics = MetricNames(
        running=f("running"), waiting=f("waiting"), kv_usage=f("kv_usage"), generated_tokens=f("generated_tokens"),
        prompt_tokens=f("prompt_tokens"), preemptions=f("preemptions"),
        prefix_cache_queries=f("prefix_cache_queries"), prefix_cache_hits=f("prefix_cache_hits"),
        spec_drafts=f("spec_drafts"), spec_draft_tokens=f("spec_draft_tokens"), spec_accepted_tokens=f("spec_accepted_tokens"),
        spec_accepted_per_pos=f("spec_accepted_per_pos"),
    ) if profile.metrics else None  # fmt: skip
    return EngineTraits(
        metrics=metrics, tokenize=TokenizeAPI() if profile.tokenize else None, version_path="/version",
        per_chunk_usage=profile.continuous_usage_stats, ignore_eos=True,
        prefix_cache_reset=HttpCall("POST", "/reset_prefix_cache"), abort=HttpCall("POST", "/abort_request", {"abort_all": True}),
    )


class SimEngine(LaunchedEngine):
    # First: the sim imitates vLLM (its /version, its metric names by default), so vLLM's recogniser says
    # yes to it too; recognised as the sim, the run follows the server's own profile (metric names included).
    recognise_order = 10

    @classmethod
    async def recognise(cls, probe: ServerProbe) -> Recognition | None:
        """The sim's own ``/debug/profile``."""
        data = await probe.json("/debug/profile")
        if not (isinstance(data, dict) and {"metric_prefix", "kv_tokens", "block_size"} <= data.keys()):
            return None
        names = f"metrics named {data['metric_prefix']}" if data.get("metrics", True) else "metrics off"
        return Recognition(f"/debug/profile: profile {data.get('name')}, {names}", {"profile": data.get("name")})

    def __init__(self, config: SimEngineConfig, workdir: Path):
        super().__init__(config, workdir, host=config.host)
        self.profile: SimProfile = load_profile(config.profile)
        self.args = config.args
        if config.model and config.model != self.profile.model:
            self.profile = self.profile.model_copy(update={"model": config.model})  # serve the name the config asks for
        self.profile_path = workdir / "sim-profile.json"

    @property
    def traits(self) -> EngineTraits:  # type: ignore[override]
        return sim_traits(self.profile)

    def command(self) -> list[str]:
        # The resolved profile travels as a file: the child sees exactly what was validated here. The server
        # module itself, not `infermatrix sim serve`: the command line's imports would delay the engine's start.
        self.profile_path.parent.mkdir(parents=True, exist_ok=True)
        self.profile_path.write_text(json.dumps(self.profile.model_dump(mode="json"), indent=2))
        # engine.args travel as vLLM's flags: the server applies them over the profile, or refuses to start.
        return [sys.executable, "-m", "infermatrix.plugins.sim.server", "--profile", str(self.profile_path),
                "--host", self.host, "--port", str(self.port), *model_flags(self.args)]  # fmt: skip

    def env(self) -> dict[str, str]:
        # The key travels in the environment, never in argv or the profile file (both are stored).
        from infermatrix.plugins.sim.faults import API_KEY_ENV

        return {API_KEY_ENV: self.api_key or ""}

    async def describe(self, client: httpx.AsyncClient) -> EngineInfo:
        info = await super().describe(client)
        profile = self.profile.model_dump(mode="json")
        try:  # attached, the server's own profile is the truth; launched, it is the same file
            r = await client.get(f"{self.base_url}/debug/profile", headers=self.headers, timeout=5)
            if r.status_code == 200:
                profile = r.json()
                if self.attach:  # its metric names, its per-chunk usage: the traits follow the server
                    self.profile = load_profile(profile)
        except (httpx.HTTPError, ValueError, ConfigError):
            pass
        info.hardware = {"type": "simulated", "profile": profile.get("name", self.profile.name)}
        info.extra["profile"] = profile
        # Parallelism as vLLM reports it: the GPUs the profile stands for (tok/s per GPU, cost; docs/slo.md).
        info.extra.update(tensor_parallel_size=int(profile.get("tensor_parallel_size") or 1), pipeline_parallel_size=1, data_parallel_size=1)
        return info

    async def read_capacity(self, client: httpx.AsyncClient) -> Capacity | None:
        """The KV budget from the cache-config info metric the sim serves (as vLLM does)."""
        family = self.profile.metric_family("cache_config")
        labels = info_labels(await self.metrics_page(client), family)
        try:
            blocks, block = int(labels["num_gpu_blocks"]), int(labels["block_size"])
        except (KeyError, ValueError):
            return None
        return Capacity(kv_tokens=blocks * block, source=f"{family} (num_gpu_blocks {blocks} × block_size {block})",
                        detail={"num_gpu_blocks": blocks, "block_size": block})  # fmt: skip


@hookimpl
def register_engines(register: Any) -> None:
    register(SimEngineConfig, SimEngine)


@hookimpl
def register_commands(cli: Any) -> None:
    from infermatrix.plugins.sim.cli import sim

    cli.add_command(sim)
