"""The ``sim`` engine kind: launches the simulated server as a child process (or attaches to one).

Imports stay light (no server stack) because every CLI start loads this module.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import Field, field_validator

from infermatrix.core.config import ConfigError, EngineConfig
from infermatrix.core.engine import LaunchedEngine
from infermatrix.core.hookspecs import hookimpl
from infermatrix.core.types import EngineInfo
from infermatrix.plugins.sim.profile import SimProfile, load_profile

__all__ = ["SimEngineConfig", "SimEngine", "register_engines", "launch_engine"]


class SimEngineConfig(EngineConfig):
    kind: Literal["sim"] = "sim"
    profile: str | dict[str, Any] = Field("demo", description="built-in profile name, a TOML/JSON path, or an inline table")
    host: str = "127.0.0.1"

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, v: str | dict[str, Any]) -> str | dict[str, Any]:
        try:  # fail at config time, with the config's field name, not at launch
            load_profile(v)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return v

    def known_max_model_len(self) -> int | None:
        """Known before launch: the config's ``max_model_len``, else the profile's (not when attaching:
        the running server's profile is then the truth, and only it can tell)."""
        if self.max_model_len is not None or self.base_url:
            return self.max_model_len
        return load_profile(self.profile).max_model_len


class SimEngine(LaunchedEngine):
    kind = "sim"

    def __init__(self, config: SimEngineConfig, workdir: Path):
        self.host = config.host  # before the base class picks the port and base_url on it
        self.profile: SimProfile = load_profile(config.profile)
        if config.model and config.model != self.profile.model:
            self.profile = self.profile.model_copy(update={"model": config.model})  # serve the name the config asks for
        super().__init__(config, workdir)
        self.profile_path = workdir / "sim-profile.json"

    def command(self) -> list[str]:
        # The resolved profile travels as a file: the child sees exactly what was validated here.
        self.profile_path.parent.mkdir(parents=True, exist_ok=True)
        self.profile_path.write_text(json.dumps(self.profile.model_dump(mode="json"), indent=2))
        return [sys.executable, "-m", "infermatrix", "sim", "serve", "--profile", str(self.profile_path),
                "--host", self.host, "--port", str(self.port)]  # fmt: skip

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
        except (httpx.HTTPError, ValueError):
            pass
        info.hardware = {"type": "simulated", "profile": profile.get("name", self.profile.name)}
        info.extra["profile"] = profile
        return info


@hookimpl
def register_engines(register: Any) -> None:
    register(SimEngineConfig)


@hookimpl
def launch_engine(config: EngineConfig, workdir: Path) -> SimEngine | None:
    return SimEngine(config, workdir) if config.kind == "sim" else None  # type: ignore[arg-type]
