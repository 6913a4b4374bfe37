"""Engines: what the runner drives. ``Engine`` declares the contract; ``AttachEngine`` reaches a server
someone else runs, ``LaunchedEngine`` starts its own (or attaches, when ``engine.base_url`` is given)."""

from __future__ import annotations

import abc
import os
import shutil
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import httpx

from infermatrix.core.config import ConfigError, EngineConfig
from infermatrix.core.engine.process import ChildProcess
from infermatrix.core.engine.stale import send_again_if_stale
from infermatrix.core.redact import redact_argv, redact_text, shell_join
from infermatrix.core.engine.traits import EngineTraits, HttpCall, error_text
from infermatrix.core.types import Capacity, EngineInfo

if TYPE_CHECKING:
    from infermatrix.core.engine.detect import Recognition, ServerProbe

__all__ = ["Engine", "AttachEngine", "LaunchedEngine", "EngineError", "free_port", "connect_host", "normalize_base_url", "probe_reachable", "missing_executable"]


class EngineError(RuntimeError):
    """The engine could not be started, reached or used."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def normalize_base_url(url: str | None) -> str:
    """``http://host:8000/v1/`` -> ``http://host:8000`` (paths are added per endpoint)."""
    url = (url or "").rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


async def probe_reachable(
    client: httpx.AsyncClient, base_url: str, timeout_s: float, headers: dict[str, str] | None = None
) -> str | None:
    """Why ``base_url`` can't be used (nothing answers, or it refuses the API key), or ``None``.

    Any other HTTP status counts as an answer: a server still loading (``/health`` 503) is
    reachable, and waiting for it to be ready is ``wait_ready``'s job.
    """
    url = normalize_base_url(base_url)
    try:
        await client.get(f"{url}/health", timeout=timeout_s)
        models = await client.get(f"{url}/v1/models", headers=headers, timeout=timeout_s)
    except (httpx.InvalidURL, httpx.UnsupportedProtocol):
        return f"{base_url!r} is not an http:// or https:// URL"
    except httpx.TimeoutException:
        return f"no answer from {url} within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        return f"cannot reach {url} ({error_text(exc)})"
    if models.status_code in (401, 403):
        how = "the API key given" if headers and headers.get("Authorization") else "no API key (give engine.api_key_env or --api-key-env)"
        return f"{url} refused {how}: /v1/models answered {models.status_code}"
    return None


class Engine(abc.ABC):
    """The contract between the runner and an engine, reached over HTTP at ``base_url``.

    A plugin subclasses :class:`AttachEngine` (a server someone else runs) or :class:`LaunchedEngine`
    (a server this process starts); the lifecycle methods below are what those two implement.
    ``kind`` is the registered config's ``kind``, so a run is always stored under its own engine.
    ``traits`` says what the engine offers beyond the standard OpenAI API (metrics, tokenize ...).
    """

    traits: EngineTraits = EngineTraits()
    attach: bool = True  # attached: someone else runs the server (launch mode sets False)
    # ``engine.kind = "auto"``: recognisers are asked in this order (lower first, then by kind name); the
    # first yes wins. The built-ins use 10-60 (docs/engines.md lists them).
    recognise_order: int = 100
    detected: dict[str, Any] | None = None  # how ``auto`` chose this engine (set by the runner), else None

    @classmethod
    async def recognise(cls, probe: ServerProbe) -> Recognition | None:
        """Whether the server behind ``probe`` is this engine (``engine.kind = "auto"``): a
        :class:`Recognition` saying what showed it, or ``None``. Ask only what identifies the engine
        (``probe`` GETs each path once, shared by every recogniser); the default recognises nothing."""
        return None

    def __init__(self, config: EngineConfig, workdir: Path):
        self.config = config
        self.workdir = workdir
        self.kind: str = config.kind
        self.api_key = config.api_key()
        self.base_url = normalize_base_url(config.base_url)

    # ---- lifecycle: what AttachEngine and LaunchedEngine implement ------------------------------

    @abc.abstractmethod
    async def start(self) -> None:
        """Launch the server (nothing to do when attaching)."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Shut the server down, whatever state it is in (nothing to do when attaching)."""

    @abc.abstractmethod
    def alive(self) -> bool:
        """Whether the server process still runs (always ``True`` when attached)."""

    @abc.abstractmethod
    def kill(self) -> None:
        """Stop at once, no grace (a second Ctrl-C). Nothing to do when attaching."""

    def exit_note(self) -> str:
        """How the engine process ended, in words ('' when attached)."""
        return ""

    def preflight(self) -> None:
        """Raise :class:`ConfigError` for a mistake found before anything starts (nothing by default)."""
        return None

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the engine's log, redacted ('' when there is none)."""
        return ""

    # ---- what every engine gets -------------------------------------------------------------------

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @property
    def launch_command(self) -> str | None:
        return None

    def redact(self, text: str) -> str:
        return redact_text(text, [self.api_key] if self.api_key else [])

    async def healthy(self, client: httpx.AsyncClient, timeout_s: float = 5.0) -> str | None:
        """One ``/health`` probe: ``None`` when it answers 200, else why not. A kept-alive connection the
        server closed while it sat in the pool fails before any answer (servers close idle connections
        after a few seconds): that is asked once more, on a fresh connection, before it counts (engine/stale.py)."""
        try:
            r = await send_again_if_stale(lambda: client.get(f"{self.base_url}/health", headers=self.headers, timeout=timeout_s), retries=1)
        except httpx.HTTPError as exc:
            return self.redact(error_text(exc))
        return None if r.status_code == 200 else f"/health answered {r.status_code}"

    async def recover(self, client: httpx.AsyncClient) -> str:
        """After the engine went down: bring it back (launch) or wait for it (attach), bounded.

        Returns what was done, for the user; raises :class:`EngineError` when it stays down.
        """
        wait = self.config.reconnect_timeout_s
        try:
            await self.wait_ready(client, wait)
        except EngineError:
            raise EngineError(
                f"{self.base_url} did not come back within {wait:g} s (engine.reconnect_timeout_s); finished cells are kept"
            ) from None
        return f"{self.base_url} is back"

    async def wait_ready(self, client: httpx.AsyncClient, timeout_s: float) -> None:
        """Ready = ``/health`` answers 200 and ``/v1/models`` answers, within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        started = time.monotonic()
        while True:
            if not self.alive():
                raise EngineError(f"{self.kind} {self.exit_note() or 'exited'} before it was ready{self._tail_note()}")
            try:
                health = await client.get(f"{self.base_url}/health", headers=self.headers, timeout=5)
                if health.status_code == 200:
                    models = await client.get(f"{self.base_url}/v1/models", headers=self.headers, timeout=5)
                    if models.status_code == 200:
                        return
                    if models.status_code in (401, 403):  # an answer, not a server still loading
                        raise EngineError(f"{self.kind} at {self.base_url} refused the API key (/v1/models answered {models.status_code})")
                    last = f"/v1/models answered {models.status_code}"
                else:
                    last = f"/health answered {health.status_code}"
            except httpx.HTTPError as exc:
                last = error_text(exc)
            if time.monotonic() >= deadline:
                raise EngineError(
                    f"{self.kind} at {self.base_url} not ready after {timeout_s:.0f} s ({self.redact(last)}){self._tail_note()}"
                )
            # Every 20 ms for the first 2 s (a refused connect costs nothing; the sim is ready in well under a
            # second and should not wait out a whole poll), then every 0.25 s.
            await anyio.sleep(0.02 if time.monotonic() - started < 2.0 else 0.25)

    def _tail_note(self) -> str:
        tail = self.log_tail(12)
        return f"; last lines of its log:\n{self.redact(tail)}" if tail else ""

    async def describe(self, client: httpx.AsyncClient) -> EngineInfo:
        """Model, ``max_model_len`` and version, asked of the server."""
        answer = await client.get(f"{self.base_url}/v1/models", headers=self.headers, timeout=10)
        answer.raise_for_status()  # an error answer is not a list of models: the caller retries or reports it
        models = answer.json()
        entries: list[dict[str, Any]] = models.get("data") or []
        wanted = self.config.model
        entry = next((m for m in entries if m.get("id") == wanted), entries[0] if entries else {})
        if wanted and entries and entry.get("id") != wanted:
            raise EngineError(f"model {wanted!r} is not served at {self.base_url} (it serves {[m.get('id') for m in entries]})")
        version = None
        path = self.traits.version_path
        if path:
            try:
                r = await client.get(f"{self.base_url}{path}", headers=self.headers, timeout=5)
                if r.status_code == 200:
                    version = r.json().get("version")
            except (httpx.HTTPError, ValueError, AttributeError):
                pass
        return EngineInfo(
            engine=self.kind,
            model=wanted or entry.get("id") or "unknown",
            version=version,
            max_model_len=self.config.max_model_len or entry.get("max_model_len"),
            launch_command=self.launch_command,
            extra={"owned_by": entry.get("owned_by")} if entry.get("owned_by") else {},
        )

    async def metrics_page(self, client: httpx.AsyncClient) -> str | None:
        """The body of the engine's metrics page (``traits.metrics.path``), or ``None``."""
        names = self.traits.metrics
        if names is None:
            return None
        try:
            r = await client.get(f"{self.base_url}{names.path}", headers=self.headers, timeout=10)
        except httpx.HTTPError:
            return None
        return r.text if r.status_code == 200 else None

    async def read_capacity(self, client: httpx.AsyncClient) -> Capacity | None:
        """The server's KV token budget and sequence limit, asked of it; ``None`` if it can't tell.

        Called after :meth:`describe`. An ``estimate_capacity`` hook that
        answers wins over this; ``engine.kv_tokens`` / ``engine.max_seqs`` in the config win over both.
        """
        return None

    async def reset_prefix_cache(self, client: httpx.AsyncClient) -> str | None:
        """Empty the engine's prefix cache, as its traits say (``prefix_cache_reset``); the runner calls it before
        every prefill probe, so a cold probe is cold even when a prompt repeats. ``None`` when the engine declares
        no way; else ``"ok"`` or why the engine refused (a refusal is noted, not an error)."""
        return await self._declared_call(client, self.traits.prefix_cache_reset)

    async def abort_requests(self, client: httpx.AsyncClient) -> str | None:
        """Abort every request the engine still holds, as its traits say (``abort``); the runner calls it at the
        end of every decode cell, so nothing of one cell runs on into the next. Answers as :meth:`reset_prefix_cache`."""
        return await self._declared_call(client, self.traits.abort)

    async def _declared_call(self, client: httpx.AsyncClient, call: HttpCall | None) -> str | None:
        if call is None:
            return None
        if "{" in call.path:  # a per-request or per-slot path: only the plugin knows the values (it overrides the method)
            return f"not called: {call.path} needs values only the engine plugin has"
        body = dict(call.body) if call.body is not None else None
        url = f"{self.base_url}{call.path}"
        try:  # a pooled connection closed under it (a cell's streams just closed) is asked again: engine/stale.py
            r = await send_again_if_stale(lambda: client.request(call.method, url, json=body, headers=self.headers, timeout=30))
        except httpx.HTTPError as exc:  # noted, as a refusal is: the measurement before it stands; a dead engine is the next step's to find
            return self.redact(call.failed(exc))
        return "ok" if r.status_code < 400 else f"{call.method} {call.path} answered {r.status_code}: {r.text[:160]}"


class AttachEngine(Engine):
    """A server someone else runs, at ``engine.base_url``: nothing to start or stop."""

    async def start(self) -> None:
        """Nothing to launch."""

    async def stop(self) -> None:
        """Nothing to shut down."""

    def alive(self) -> bool:
        return True

    def kill(self) -> None:
        """Nothing to kill."""


def missing_executable(program: str) -> str | None:
    """Why ``program`` (a path, or a name looked up on ``PATH``) can't be run, or ``None`` if it can."""
    if os.sep in program:
        if not os.path.exists(program):
            return f"{program!r} does not exist"
        if os.path.isdir(program) or not os.access(program, os.X_OK):
            return f"{program!r} is not an executable file"
        return None
    return None if shutil.which(program) else f"{program!r} is not on PATH"


def connect_host(host: str) -> str:
    """Where to reach a server bound to ``host``: a wildcard bind is reached on loopback."""
    return "127.0.0.1" if host in ("", "0.0.0.0", "::", "[::]") else host


class LaunchedEngine(Engine):
    """An engine this process starts as a child process group, and stops, whatever happens.

    Subclasses implement :meth:`command` (the argv that serves on ``self.host:self.port``) and may
    give ``host`` / ``port`` to ``__init__`` (a free port on ``host`` when ``port`` is ``None``).
    With ``engine.base_url`` set it attaches instead, and launches nothing.
    """

    def __init__(self, config: EngineConfig, workdir: Path, *, host: str = "127.0.0.1", port: int | None = None):
        super().__init__(config, workdir)
        self.attach = bool(config.base_url)
        self.host = host
        self.port = port or free_port(host or "127.0.0.1")
        if not self.attach:
            self.base_url = f"http://{connect_host(host)}:{self.port}"
        self.log_path = workdir / f"{self.kind}.log"
        self.child: ChildProcess | None = None
        self.restarts = 0
        # Launch to ready, in seconds, of the first launch (a restart's is not the engine's start-up time);
        # described as ``engine_extra.startup_s``. None when attached.
        self.startup_s: float | None = None
        self._launched_at: float | None = None

    @abc.abstractmethod
    def command(self) -> list[str]:
        """The argv that starts the server on ``self.host:self.port``."""

    def env(self) -> dict[str, str]:
        return {}

    def preflight(self) -> None:
        """The program the command runs must exist and be executable: said in one line before the run
        exists, instead of a traceback from deep inside the launch."""
        if self.attach:
            return
        why = missing_executable(self.command()[0])
        if why:
            raise ConfigError(f"engine: cannot launch {self.kind}: {why}")

    @property
    def launch_command(self) -> str | None:
        if self.attach:
            return None
        return shell_join(redact_argv(self.command(), [self.api_key] if self.api_key else []))

    async def start(self) -> None:
        if self.attach:
            return
        argv = self.command()
        self.child = ChildProcess(argv, self.log_path, env=self.env(), display=self.launch_command)
        if self._launched_at is None:
            self._launched_at = time.monotonic()
        try:
            self.child.start()
        except OSError as exc:  # the program vanished since preflight (or a restart): a failed run, one line
            self.child = None
            raise EngineError(f"cannot start {self.kind}: {missing_executable(argv[0]) or exc.strerror or exc}") from None

    async def wait_ready(self, client: httpx.AsyncClient, timeout_s: float) -> None:
        await super().wait_ready(client, timeout_s)
        if self._launched_at is not None and self.startup_s is None:
            # To the millisecond: a small engine on an idle machine is ready in tens of ms (0.1 s rounding read 0.0).
            self.startup_s = round(time.monotonic() - self._launched_at, 3)

    async def describe(self, client: httpx.AsyncClient) -> EngineInfo:
        """The server's own answer, plus what only the launcher knows: whether it attached, and how long
        the launch took to be ready (``startup_s``)."""
        info = await super().describe(client)
        info.extra.setdefault("startup_s", self.startup_s)
        info.extra.setdefault("attached", self.attach)
        return info

    async def stop(self) -> None:
        child = self.child
        if child is not None:
            try:
                # In a thread: stopping waits out grace periods. self.child stays set meanwhile, so kill() reaches it.
                await anyio.to_thread.run_sync(child.stop)
            finally:
                self._last_exit = child.exit_note()
                if self.child is child:
                    self.child = None
                self._redact_log()

    def _redact_log(self) -> None:
        """The engine may have printed the key (some log their arguments): keep it out of the kept log."""
        if not self.api_key:
            return
        try:
            text = self.log_path.read_text(errors="replace")
            if self.api_key in text:
                self.log_path.write_text(self.redact(text))
        except OSError:
            pass

    def alive(self) -> bool:
        return self.attach or (self.child is not None and self.child.alive())

    def kill(self) -> None:
        if self.child is not None:
            self.child.kill_now()

    def exit_note(self) -> str:
        if self.attach:
            return ""
        return self.child.exit_note() if self.child is not None else getattr(self, "_last_exit", "was never started")

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the engine's log, redacted."""
        if self.child is not None:
            return self.redact(self.child.log_tail(lines))
        try:  # after stop(): the log file is still there
            return self.redact("\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:]))
        except OSError:
            return ""

    async def recover(self, client: httpx.AsyncClient) -> str:
        if self.attach:
            return await super().recover(client)
        limit = self.config.max_restarts
        if self.restarts >= limit:
            raise EngineError(f"{self.kind} went down again after {self.restarts} restart(s) (engine.max_restarts = {limit}){self._tail_note()}")
        self.restarts += 1
        await self.stop()  # what is left of the old process group
        await self.start()
        await self.wait_ready(client, self.config.ready_timeout_s)
        return f"{self.kind} restarted ({self.restarts} of at most {limit})"
