"""Helpers for tests that drive real processes: a sim server, the real command line.

Imported as ``from imxtest import ...`` (``tests/`` is on sys.path through the root conftest); not named
conftest, because several test folders have a conftest of their own.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

import infermatrix.testing as kit
from infermatrix.testing import free_port  # noqa: F401 (tests import it from here)

ROOT = Path(__file__).parents[1]


def engine_absent(reason: str) -> None:
    """The older name of :func:`engine_missing`, the engine told from the reason's words."""
    engine_missing("llama-cpp" if "llama" in reason.lower() or "gguf" in reason.lower() else "vllm-cpu", reason)


def SimServer(profile: str, log: Path) -> kit.SimServer:  # noqa: N802 (was a class; tests construct it by name)
    """A real ``infermatrix sim serve`` process on a loopback port (the plugin kit's launcher, run from the repo root)."""
    return kit.launch_sim(profile, log, cwd=ROOT)


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    """The real command line, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "infermatrix", *args],
        capture_output=True, text=True, cwd=cwd or ROOT, timeout=timeout,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


def processes_mentioning(marker: str) -> list[str]:
    """Live processes whose command line mentions ``marker`` (a test's tmp dir, a model file), zombies excluded."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE or p.pid == os.getpid():
                continue
            cmd = " ".join(p.info["cmdline"] or [])
        except psutil.Error:
            continue
        if marker in cmd:
            found.append(f"{p.pid} {cmd[:200]}")
    return found


def row_dict(con: Any, sql: str, *params: Any) -> dict[str, Any]:
    """The first row of ``sql`` on an open DuckDB connection, by column name."""
    cur = con.execute(sql, list(params))
    names = [d[0] for d in cur.description]
    return dict(zip(names, cur.fetchone()))


def dict_rows(db: Path, sql: str, *params: Any) -> list[dict[str, Any]]:
    """Every row of ``sql`` on a DuckDB file (opened read-only), by column name: the kit's ``query_db``."""
    return kit.query_db(db, sql, params)


def as_json(value: Any) -> Any:
    """A JSON column's value: DuckDB hands JSON back as text."""
    return json.loads(value) if isinstance(value, str) else value


# The real command line for a real engine's run: its launch alone can take minutes on two cores.
engine_cli = functools.partial(run_cli, timeout=600)


# ---- real engines: skipped on a developer's machine, a failure in CI ----------------------------------------------
SETUP_LOGS_VAR = "INFERMATRIX_SETUP_LOGS"  # .ci/run keeps each engine's set-up log here as <engine>.log


def in_ci() -> bool:
    """CI=true (GitHub Actions, GitLab and most runners set it; .ci/run is run with it)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def setup_log_tail(engine: str, lines: int = 12) -> str:
    """The last lines of ``engine``'s set-up log (pip's noise left out), or why there is none."""
    where = os.environ.get(SETUP_LOGS_VAR)
    if not where:
        return f"(no set-up log: {SETUP_LOGS_VAR} is not set; .ci/run sets it)"
    log = Path(where) / f"{engine}.log"
    if not log.is_file():
        return f"(no set-up log at {log})"
    kept = [ln for ln in log.read_text(errors="replace").splitlines() if not ln.startswith("WARNING: Location")]
    return f"last lines of {log}:\n" + "\n".join(kept[-lines:])


def engine_missing(engine: str, why: str) -> None:
    """A real-engine test cannot run: skip it on a developer's machine; under CI=true fail it, naming the engine
    and showing the end of its set-up log, because a skip there is a check that cannot fail (issue 22)."""
    if in_ci():
        pytest.fail(f"real engine {engine} missing under CI=true: {why}\n{setup_log_tail(engine)}", pytrace=False)
    pytest.skip(why)


class Freezer:
    """Stops process ``pid`` for ``freeze_s`` each time :meth:`freeze` is called, as a kernel starving it would: a shell
    started beforehand (no fork at the moment that matters) does the stop and the resume on each line it reads, so the
    stopped process, the caller included, resumes by itself. Use as a context manager; closing its stdin ends it."""

    def __init__(self, pid: int, freeze_s: float) -> None:
        script = f"while read _; do kill -STOP {pid}; sleep {freeze_s}; kill -CONT {pid}; done"
        self.proc = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE)

    def freeze(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def __enter__(self) -> "Freezer":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(60)
