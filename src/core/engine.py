"""Engines: the objects the ``launch_engine`` hook returns. Attach mode and launch mode share one API."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from infermatrix.core.config import EngineConfig
from infermatrix.core.process import ChildProcess
from infermatrix.core.redact import redact_argv, redact_text, shell_join
from infermatrix.core.types import EngineInfo

__all__ = ["Engine", "LaunchedEngine", "EngineError", "free_port"]


class EngineError(RuntimeError):
    """The engine could not be started, reached or used."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Engine:
    """An engine reached over HTTP at ``base_url``. This base class attaches to a running server."""

    kind = "openai"

    def __init__(self, config: EngineConfig, workdir: Path):
        self.config = config
        self.workdir = workdir
        self.api_key = config.api_key()
        self.base_url = (config.base_url or "").rstrip("/")
        if self.base_url.endswith("/v1"):
            self.base_url = self.base_url[: -len("/v1")]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @property
    def launch_command(self) -> str | None:
        return None

    def redact(self, text: str) -> str:
        return redact_text(text, [self.api_key] if self.api_key else [])

    async def start(self) -> None:
        """Launch the server (nothing to do when attaching)."""

    async def stop(self) -> None:
        """Shut the server down (nothing to do when attaching)."""

    def alive(self) -> bool:
        return True

    def log_tail(self, lines: int = 20) -> str:
        return ""

    async def wait_ready(self, client: httpx.AsyncClient, timeout_s: float) -> None:
        """Ready = ``/health`` answers 200 and ``/v1/models`` answers, within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while True:
            if not self.alive():
                raise EngineError(f"{self.kind} exited before it was ready{self._tail_note()}")
            try:
                health = await client.get(f"{self.base_url}/health", headers=self.headers, timeout=5)
                if health.status_code == 200:
                    models = await client.get(f"{self.base_url}/v1/models", headers=self.headers, timeout=5)
                    if models.status_code == 200:
                        return
                    last = f"/v1/models answered {models.status_code}"
                else:
                    last = f"/health answered {health.status_code}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if time.monotonic() >= deadline:
                raise EngineError(
                    f"{self.kind} at {self.base_url} not ready after {timeout_s:.0f} s ({self.redact(last)}){self._tail_note()}"
                )
            await anyio.sleep(0.25)

    def _tail_note(self) -> str:
        tail = self.log_tail(12)
        return f"; last lines of its log:\n{self.redact(tail)}" if tail else ""

    async def describe(self, client: httpx.AsyncClient) -> EngineInfo:
        """Model, ``max_model_len`` and version, asked of the server."""
        models = (await client.get(f"{self.base_url}/v1/models", headers=self.headers, timeout=10)).json()
        entries: list[dict[str, Any]] = models.get("data") or []
        wanted = self.config.model
        entry = next((m for m in entries if m.get("id") == wanted), entries[0] if entries else {})
        if wanted and entries and entry.get("id") != wanted:
            raise EngineError(f"model {wanted!r} is not served at {self.base_url} (it serves {[m.get('id') for m in entries]})")
        version = None
        try:
            r = await client.get(f"{self.base_url}/version", headers=self.headers, timeout=5)
            if r.status_code == 200:
                version = r.json().get("version")
        except (httpx.HTTPError, ValueError):
            pass
        return EngineInfo(
            engine=self.kind,
            model=wanted or entry.get("id") or "unknown",
            version=version,
            max_model_len=self.config.max_model_len or entry.get("max_model_len"),
            launch_command=self.launch_command,
            extra={"owned_by": entry.get("owned_by")} if entry.get("owned_by") else {},
        )


class LaunchedEngine(Engine):
    """An engine this process starts as a child process group, and stops, whatever happens."""

    host = "127.0.0.1"

    def __init__(self, config: EngineConfig, workdir: Path):
        super().__init__(config, workdir)
        self.attach = bool(config.base_url)
        self.port = free_port(self.host)
        if not self.attach:
            self.base_url = f"http://{self.host}:{self.port}"
        self.log_path = workdir / f"{self.kind}.log"
        self.child: ChildProcess | None = None

    def command(self) -> list[str]:
        """The argv that starts the server on ``self.host:self.port``."""
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return {}

    @property
    def launch_command(self) -> str | None:
        if self.attach:
            return None
        return shell_join(redact_argv(self.command(), [self.api_key] if self.api_key else []))

    async def start(self) -> None:
        if self.attach:
            return
        self.child = ChildProcess(self.command(), self.log_path, env=self.env(), display=self.launch_command)
        self.child.start()

    async def stop(self) -> None:
        if self.child is not None:
            child, self.child = self.child, None
            await anyio.to_thread.run_sync(child.stop)

    def alive(self) -> bool:
        return self.attach or (self.child is not None and self.child.alive())

    def log_tail(self, lines: int = 20) -> str:
        return self.child.log_tail(lines) if self.child else ""
