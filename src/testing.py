"""The plugin author's testing kit: what a plugin's own tests need, with nothing of ``infermatrix.core``.

    from infermatrix.testing import plugin_manager, run_matrix, sim_server

    def test_my_engine(tmp_path):
        with sim_server(metric_names={"running": "toy:running"}, capacity_gauges={"kv_tokens": "toy:kv_tokens"}) as sim:
            result = run_matrix({"kind": "toy", "base_url": sim.base_url}, plugins=[my_plugin], db=tmp_path / "t.duckdb")
        assert result.status == "completed" and result.cells()[0]["status"] == "valid"

* :func:`plugin_manager` — a fresh plugin manager: the built-ins plus yours (no entry points, nothing global).
* :func:`sim_server` — the built-in simulated engine as a real server process on a free loopback port,
  playing your engine (its metric names, its capacity gauges, no ``/tokenize`` …); stopped on exit.
* :func:`launch_sim` — the same server from a profile name or file, started and left for you to stop.
* :func:`run_matrix` — one call: a small matrix through the real runner into a DuckDB file (a temporary
  one unless given), returning the run's status and its rows.

docs/writing-a-plugin.md ("Testing a plugin") shows it in use.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence, TypeVar

import httpx
import pluggy

__all__ = ["plugin_manager", "free_port", "SimServer", "sim_server", "launch_sim", "RunResult", "run_matrix", "query_db"]


def plugin_manager(*plugins: object, entrypoints: bool = False) -> pluggy.PluginManager:
    """A fresh manager with the built-in plugins and ``plugins`` (modules or objects with hooks);
    ``entrypoints=True`` also loads the installed ``infermatrix`` entry points, as the command line does."""
    from infermatrix.core.plugins import get_plugin_manager

    return get_plugin_manager(load_entrypoints=entrypoints, extra=list(plugins))


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SimServer:
    """A running ``infermatrix sim serve`` process (see :func:`sim_server`)."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    profile: dict[str, Any]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def truth(self, since: float | None = None, blocks: bool = False) -> dict[str, Any]:
        """The server's ground truth (``GET /debug/truth``: every request as it really ran, those that ended
        before ``since`` left out; docs/sim.md); with ``blocks``, each request's prompt block hashes (prefix-cache
        chain hashes) too: a finished request's only with the profile key ``record_prompt_blocks=True``."""
        params: dict[str, Any] = {"since": since} if since is not None else {}
        if blocks:
            params["blocks"] = "1"
        data: dict[str, Any] = httpx.get(f"{self.base_url}/debug/truth", params=params or None, timeout=30).json()
        return data

    def wait_unfinished(self, pattern: str, timeout: float = 60.0, prefilling: bool = False) -> dict[str, Any] | None:
        """Block until the sim holds a received, unfinished request whose X-Request-Id matches the regular expression
        ``pattern`` (searched) — with ``prefilling``, one without its first token yet (``GET /debug/wait``): its
        ``request_id``, ``received`` and the time ``t``; None after ``timeout`` seconds."""
        params: dict[str, Any] = {"unfinished": pattern, "timeout": timeout, **({"prefilling": "1"} if prefilling else {})}
        r = httpx.get(f"{self.base_url}/debug/wait", params=params, timeout=timeout + 30)
        if r.status_code == 408:
            return None
        r.raise_for_status()
        found: dict[str, Any] = r.json()
        return found

    def reset(self) -> None:
        """Forget the record so far (``POST /debug/reset``)."""
        httpx.post(f"{self.base_url}/debug/reset", timeout=10)

    def metrics(self) -> str:
        """The ``/metrics`` page, as your engine's ``metrics_page`` would read it."""
        return httpx.get(f"{self.base_url}/metrics", timeout=10).text

    def stop(self) -> None:
        """Stop the server and wait for it (SIGTERM, then SIGKILL after 10 s)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5)


@contextlib.contextmanager
def sim_server(
    profile: str = "tiny", *, metric_prefix: str | None = None, metric_names: dict[str, str] | None = None,
    capacity_gauges: dict[str, str] | None = None, max_num_seqs: int | None = None, tokenize: bool = True,
    workdir: str | Path | None = None, start_timeout_s: float = 30.0, **fields: Any,
) -> Iterator[SimServer]:
    """The simulated engine on a free port, playing your engine, stopped (and waited for) on exit.

    ``profile`` is a built-in profile (``tiny``: small and fast) or a profile file; the keyword arguments
    are profile keys over it (docs/sim.md): ``metric_prefix`` and ``metric_names`` (role -> your family
    name) rename ``/metrics``, ``capacity_gauges`` (``kv_tokens`` / ``max_seqs`` -> a name) publish the
    capacity as plain gauges, ``max_num_seqs`` limits requests running at once, ``tokenize=False`` serves
    no ``/tokenize``; any other profile key (``kv_tokens``, ``tokenizer_file`` …) goes in ``fields``."""
    table: dict[str, Any] = {"base": profile, **fields}
    for key, value in (("metric_prefix", metric_prefix), ("metric_names", metric_names),
                       ("capacity_gauges", capacity_gauges), ("max_num_seqs", max_num_seqs)):  # fmt: skip
        if value is not None:
            table[key] = value
    if not tokenize:
        table["tokenize"] = False
    with contextlib.ExitStack() as stack:
        folder = Path(workdir) if workdir is not None else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="imx-sim-")))
        folder.mkdir(parents=True, exist_ok=True)
        prof = folder / "sim-profile.json"
        prof.write_text(json.dumps(table))
        server: SimServer = launch_sim(prof, folder / "sim.log", timeout_s=start_timeout_s)
        server.profile = table
        try:
            yield server
        finally:
            server.stop()


S = TypeVar("S", bound=SimServer)


def launch_sim(
    profile: str | Path, log: Path, *, port: int | None = None, env: dict[str, str] | None = None,
    cwd: str | Path | None = None, append_log: bool = False, timeout_s: float = 30.0, cls: type[S] = SimServer,  # type: ignore[assignment]
) -> S:
    """Start ``infermatrix sim serve --profile PROFILE`` (a built-in name or a profile file) on ``port`` (a free
    one by default) in a process group of its own, output to ``log``, and wait until ``/health`` answers 200.
    A server that does not come up in ``timeout_s`` is stopped and the end of its log raised. The caller stops
    it (:meth:`SimServer.stop`); :func:`sim_server` does that for you. ``cls`` builds a subclass with more helpers."""
    port = port or free_port()
    with log.open("ab" if append_log else "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "infermatrix", "sim", "serve", "--profile", str(profile), "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            cwd=cwd, env={**os.environ, **env} if env else None,
        )  # fmt: skip
    server = cls(proc=proc, port=port, log=log, profile={"base": str(profile)})
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{server.base_url}/health", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"the sim did not start: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.05)


def query_db(db: str | Path, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """Rows of ``sql`` on a results DuckDB file (opened read-only), by column name (JSON columns as text)."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute(sql, list(params))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]
    finally:
        con.close()


@dataclass
class RunResult:
    """A finished run: its id and status (``completed`` | ``interrupted`` | ``failed``), the error if any,
    where it is stored, and what the runner printed."""

    run_id: str | None
    status: str
    error: str | None
    db: Path
    output: str
    _keep: Any = field(default=None, repr=False)  # the temporary directory holding ``db``, while this lives

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows of ``sql`` on the run's DuckDB file, by column name (JSON columns as text)."""
        return query_db(self.db, sql, params)

    def run(self) -> dict[str, Any]:
        """The run's row (``runs``), JSON columns decoded."""
        return _decoded(self.query("SELECT * FROM runs WHERE run_id = ?", [self.run_id])[0])

    def cells(self) -> list[dict[str, Any]]:
        """The decode cells (``cells``), by context then concurrency, JSON columns decoded."""
        rows = self.query("SELECT * FROM cells WHERE run_id = ? ORDER BY context_tokens, concurrency", [self.run_id])
        return [_decoded(r) for r in rows]

    def prefill(self) -> list[dict[str, Any]]:
        """The prefill probes (``prefill``), by context."""
        return [_decoded(r) for r in self.query("SELECT * FROM prefill WHERE run_id = ? ORDER BY context_tokens", [self.run_id])]


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in row.items():
        if isinstance(v, str) and v[:1] in "{[":
            try:
                v = json.loads(v)
            except ValueError:
                pass
        out[k] = v
    return out


# Small and quick: one short window per cell, a short wait for steady state, no client verdict.
SMALL_MATRIX: dict[str, Any] = {"contexts": ["1K"], "concurrency": [1], "duration_s": 1.0, "max_output": 64,
                                "steady_timeout_s": 2.0, "check_client": False}  # fmt: skip


def run_matrix(
    engine: dict[str, Any], *, plugins: Sequence[object] = (), matrix: dict[str, Any] | None = None,
    db: str | Path | None = None, config: dict[str, Any] | None = None,
) -> RunResult:
    """Run a small matrix with the real runner, in this process, and return the stored run.

    ``engine`` is the ``[engine]`` table (``{"kind": "toy", "base_url": ...}``); ``plugins`` are registered
    besides the built-ins; ``matrix`` keys replace :data:`SMALL_MATRIX`'s (one 1K cell, N = 1, a 1 s window);
    ``config`` adds other tables (``validity``, ``loops`` …). Without ``db`` the run goes to a temporary
    DuckDB file that lives as long as the result. A config mistake raises ``ConfigError``."""
    import anyio
    from rich.console import Console

    from infermatrix.core.registry import validate_config
    from infermatrix.core.run.runner import execute_run
    from infermatrix.core.store import open_store

    pm = plugin_manager(*plugins)
    cfg = validate_config(pm, {**(config or {}), "engine": engine, "matrix": {**SMALL_MATRIX, **(matrix or {})}}, "run_matrix")
    keep = None
    if db is None:
        keep = tempfile.TemporaryDirectory(prefix="imx-run-")
        db = Path(keep.name) / "run.duckdb"
    out = io.StringIO()
    store = open_store(str(db))
    try:
        outcome = anyio.run(lambda: execute_run(pm, cfg, store, Console(file=out, width=200, color_system=None)))
    finally:
        store.close()
    return RunResult(run_id=outcome.run_id, status=outcome.status, error=outcome.error, db=Path(db), output=out.getvalue(), _keep=keep)
