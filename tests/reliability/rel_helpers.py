"""Helpers for the reliability suite: configs and sim profiles on disk, the real CLI as a process
that can be signalled mid-cell, sim servers the test owns (attach mode), and process-tree checks.

Every wait is a bounded poll on a condition; nothing sleeps and hopes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import duckdb
import httpx
import psutil
from imxtest import processes_mentioning

from infermatrix.testing import SimServer, free_port, launch_sim  # noqa: F401 (free_port: tests import it from here)

ROOT = Path(__file__).parents[2]
PY = sys.executable


# ---- files ------------------------------------------------------------------------------------

def write_profile(path: Path, faults: dict[str, Any] | None = None, **fields: Any) -> Path:
    """A JSON sim profile based on the built-in ``tiny`` one."""
    data: dict[str, Any] = {"base": "tiny", "name": path.stem, **fields}
    if faults is not None:
        data["faults"] = faults
    path.write_text(json.dumps(data))
    return path


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def write_config(path: Path, **tables: dict[str, Any]) -> Path:
    """A TOML run config: ``write_config(p, engine={...}, matrix={...})``."""
    lines = []
    for name, table in tables.items():
        lines.append(f"[{name}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in table.items())
    path.write_text("\n".join(lines) + "\n")
    return path


def sim_config(tmp: Path, profile: Path, db: Path | None = None, **matrix: Any) -> Path:
    """A launch-mode config for a sim profile: one 1K row, short cells."""
    # check_client off: on a loaded test machine a cell may be judged client-bound, which is not what these tests are about.
    m = {"contexts": ["1K"], "prefill_contexts": [], "concurrency": [1, 2], "duration_s": 1.0, "max_output": 16,
         "check_client": False, **matrix}
    return write_config(tmp / "run.toml", engine={"kind": "sim", "profile": str(profile), "ready_timeout_s": 30}, matrix=m,
                        validity=PACE_FREE)


# The pace rule off: with 16-token requests on a loaded 2-core machine the client's own restart gap is a
# large share of each stream's time (active fraction 0.7-0.8), so whether a cell is "valid" would depend
# on the machine's load. These tests are about faults; test_rel_validity.py tests the rules.
PACE_FREE = {"min_active_fraction": 0.0}
PACE_FREE_ARGS = ("--set", "validity.min_active_fraction=0")


# ---- the CLI as a process -----------------------------------------------------------------------

def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERMATRIX_SIM_")}
    return {**env, "COLUMNS": "200", **(extra or {})}


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "infermatrix", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=cli_env(env), stdin=subprocess.DEVNULL)  # fmt: skip


class Cli:
    """``infermatrix ARGS`` running in the background, its output going to files we can poll."""

    def __init__(self, *args: str, cwd: Path, env: dict[str, str] | None = None, name: str = "cli"):
        self.out_path, self.err_path = cwd / f"{name}.out", cwd / f"{name}.err"
        self.proc = subprocess.Popen(
            [PY, "-m", "infermatrix", *args], cwd=cwd, env=cli_env(env), stdin=subprocess.DEVNULL,
            stdout=self.out_path.open("wb"), stderr=self.err_path.open("wb"),
        )
        self.seen: set[int] = set()  # every descendant pid seen while it ran

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    @property
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def descendants(self) -> list[psutil.Process]:
        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        self.seen.update(p.pid for p in kids)
        return kids

    def wait_for(self, cond: Callable[[], Any], what: str, timeout: float = 30) -> Any:
        """Poll ``cond`` until it is truthy; fail (with the CLI's output) if it isn't in time or the CLI exits."""
        deadline = time.monotonic() + timeout
        while True:
            self.descendants()
            got = cond()
            if got:
                return got
            if self.proc.poll() is not None:
                raise AssertionError(f"the CLI exited ({self.proc.returncode}) before {what}:\n{self.stderr[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}:\n{self.stderr[-3000:]}")
            time.sleep(0.05)

    def wait_stderr(self, pattern: str, timeout: float = 30) -> re.Match:
        return self.wait_for(lambda: re.search(pattern, self.stderr), f"stderr to match {pattern!r}", timeout)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_tree()
            raise AssertionError(f"the CLI did not exit within {timeout} s:\n{self.stderr[-3000:]}") from None

    def kill_tree(self) -> None:
        for p in [*self.descendants(), psutil.Process(self.proc.pid)]:
            try:
                p.kill()
            except psutil.Error:
                pass
        self.proc.wait(10)

    def engine_port(self) -> int:
        """The launched sim's port, read from its command line."""
        def port() -> int | None:
            for p in self.descendants():
                try:
                    cmd = p.cmdline()
                except psutil.Error:
                    continue
                if "--port" in cmd and is_sim(cmd):
                    return int(cmd[cmd.index("--port") + 1])
            return None
        return self.wait_for(port, "the engine process")


def is_sim(cmdline: list[str]) -> bool:
    """A sim server's command line: ``python -m infermatrix.plugins.sim.server …`` (how the sim engine is
    launched) or ``infermatrix sim serve …``."""
    return any(a == "sim" or a.startswith("infermatrix.plugins.sim") for a in cmdline)


def running_requests(port: int) -> float:
    """``vllm:num_requests_running`` of the sim on ``port`` (0 when it does not answer)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return 0.0
    m = re.search(r"^vllm:num_requests_running\{[^}]*\} ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


# ---- sim servers the test owns (attach mode) -----------------------------------------------------

def Sim(profile: Path, log: Path, port: int | None = None, api_key: str | None = None) -> SimServer:  # noqa: N802
    """``infermatrix sim serve`` as a process of its own, on ``port`` (a free one by default), its log appended."""
    env = cli_env({"INFERMATRIX_SIM_API_KEY": api_key} if api_key else None)
    return launch_sim(profile, log, port=port, env=env, cwd=ROOT, append_log=True)


# ---- what is left afterwards -----------------------------------------------------------------------

def assert_nothing_left(marker: Path | str, cli: Cli | None = None) -> None:
    """No process of the run is alive: not the CLI's descendants seen while it ran, not anything
    whose command line mentions the test's directory. Checked at once, without a grace period: the
    CLI must have waited for its engine before exiting."""
    left = processes_mentioning(str(marker))
    if cli is not None:
        for pid in cli.seen:
            try:
                p = psutil.Process(pid)
                if p.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{pid} {' '.join(p.cmdline())[:200]}")
            except psutil.Error:
                pass
    assert not left, f"processes left running: {left}"


def one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{stderr}"
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


# ---- the database ---------------------------------------------------------------------------------

def query(db: Path, sql: str, params: list[Any] | None = None) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def cells(db: Path) -> dict[tuple[int, int], dict[str, Any]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute("SELECT * FROM cells")
        cols = [d[0] for d in cur.description]
        out = {}
        for row in cur.fetchall():
            d = dict(zip(cols, row))
            d["flags"] = json.loads(d["flags"]) if d["flags"] else {}
            out[(d["context_tokens"], d["concurrency"])] = d
        return out
    finally:
        con.close()


def run_row(db: Path) -> dict[str, Any]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute("SELECT * FROM runs ORDER BY started_at DESC LIMIT 1")
        cols = [d[0] for d in cur.description]
        return dict(zip(cols, cur.fetchone()))
    finally:
        con.close()
