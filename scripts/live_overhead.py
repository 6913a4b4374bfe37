#!/usr/bin/env python3
"""What the live view (core/run/live.py) costs the client: the same run with and without it, on a pseudo-terminal.

    .venv/bin/python scripts/live_overhead.py [--reps 3] [--contexts 256,2K] [--concurrency 1,8,32] [--duration 3]

It starts one sim server and runs ``infermatrix run --engine sim --base-url …`` against it on a pseudo-terminal
(150 × 50), ``--no-live`` and live in turn (the order alternating between repetitions), and prints per mode:

* the client process's CPU seconds for the whole run (its rusage: the engine is the separate sim, so this is the
  client alone), and per second of the run;
* over the measured windows, the cells' own client readings (flags.client.window: the process's mean CPU % and the event
  loop's lag p99, docs/metrics.md "Client verdict"), the median over cells and repetitions;
* the bytes the run wrote to the terminal;

then live ÷ no-live for each. Also one redraw's cost in this process: an 8 × 8 grid, framed and drawn onto a
terminal console (into /dev/null), and what :data:`REDRAW_HZ` of them take of one core. docs/performance.md, "Live view".
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import select
import statistics
import struct
import sys
import tempfile
import termios
import time
from collections import Counter
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]


def run_in_pty(args: list[str], cols: int = 150, lines: int = 50, cwd: Path = ROOT, timeout_s: float = 600) -> tuple[int, bytes, float]:
    """``python -m infermatrix ARGS`` with stdin, stdout and stderr on a pseudo-terminal of ``cols × lines``: its exit
    code, every byte it wrote, and its CPU seconds (user + system, from its rusage)."""
    import subprocess

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, cols, 0, 0))
    env = {**os.environ, "COLUMNS": str(cols), "LINES": str(lines), "TERM": "xterm-256color"}
    for var in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):  # rich reads these before the terminal
        env.pop(var, None)
    proc = subprocess.Popen([sys.executable, "-m", "infermatrix", *args], stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env,
                            close_fds=True, start_new_session=True)  # fmt: skip
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the terminal's last writer closed it
                break
            if not data:
                break
            out += data
        else:
            proc.kill()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        return proc.returncode, bytes(out), usage.ru_utime + usage.ru_stime
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait()
        os.close(master)


def _client_readings(db: Path) -> list[dict]:
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT flags FROM cells WHERE status <> 'over_capacity'").fetchall()
    return [((json.loads(f) if isinstance(f, str) else f).get("client") or {}).get("window") or {} for (f,) in rows]


def redraw_cost_ms(n: int = 300) -> float:
    """One redraw of an 8 × 8 grid with every cell finished and a full status line, in ms: the board's frame,
    drawn by the live view onto a terminal console (into /dev/null), each with a new tok/s so none is skipped."""
    from rich.console import Console

    from infermatrix.core.run.live import GridPlan
    from infermatrix.core.run.progress import RunProgress

    contexts, conc = [2**k * 1024 for k in range(8)], [2**k for k in range(8)]
    with open(os.devnull, "w") as sink, RunProgress(Console(file=sink, force_terminal=True, width=150, height=50), 65) as progress:
        progress.plan(GridPlan(contexts, conc, contexts, Counter(decode=65), {"decode": 30.0}))
        for c in contexts:
            for k in conc:
                progress.board.finished("valid", (c, k), 1234.5 * k)
        progress.cell("decode 256K × 128", (2**18, 128))
        progress.on_phase("measure", time.monotonic() + 30)
        progress.on_reading(batch=128, kv=0.5, watts=700.0)
        t0 = time.perf_counter()
        for _ in range(n):
            progress.on_tokens(1000)
            progress.redraw()
        took = time.perf_counter() - t0
        assert progress.redraws >= n
    return 1000 * took / n


def main() -> None:
    from infermatrix.core.run.progress import REDRAW_HZ
    from infermatrix.testing import launch_sim

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--contexts", default="256,2K")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--duration", default="3")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="imx-live-"))
    sim = launch_sim("demo", tmp / "sim.log", cwd=ROOT)
    stats: dict[str, dict[str, list[float]]] = {"no-live": {}, "live": {}}
    try:
        for rep in range(a.reps):
            for mode in (("no-live", "live") if rep % 2 == 0 else ("live", "no-live")):
                db = tmp / f"{mode}-{rep}.duckdb"
                args = ["run", "--engine", "sim", "--base-url", sim.base_url, "--contexts", a.contexts, "--concurrency", a.concurrency,
                        "--duration", a.duration, "--max-output", "128", "--db", str(db)]  # fmt: skip
                t0 = time.monotonic()
                rc, raw, cpu = run_in_pty(args + (["--no-live"] if mode == "no-live" else []))
                wall = time.monotonic() - t0
                if rc != 0:
                    sys.exit(f"{mode} run failed ({rc}): {raw.decode(errors='replace')[-2000:]}")
                s = stats[mode]
                s.setdefault("cpu_s", []).append(cpu)
                s.setdefault("cpu_per_s", []).append(cpu / wall)
                s.setdefault("bytes", []).append(len(raw))
                for c in _client_readings(db):
                    for key in ("cpu_pct", "lag_p99_ms"):
                        if c.get(key) is not None:
                            s.setdefault(key, []).append(c[key])
                print(f"rep {rep} {mode:8} {wall:6.1f} s wall  {cpu:6.2f} s CPU  {len(raw):8,} bytes", flush=True)
    finally:
        sim.stop()
    print(f"\n{'':22}{'no-live':>12}{'live':>12}{'live ÷ no-live':>16}")
    for key, what in (("cpu_s", "client CPU s / run"), ("cpu_per_s", "client CPU s / s"), ("cpu_pct", "window CPU % (cells)"),
                      ("lag_p99_ms", "window lag p99 ms"), ("bytes", "bytes to terminal")):  # fmt: skip
        if key not in stats["no-live"] or key not in stats["live"]:
            print(f"{what:22}{'not read':>12}")
            continue
        off, on = statistics.median(stats["no-live"][key]), statistics.median(stats["live"][key])
        print(f"{what:22}{off:12,.3f}{on:12,.3f}{on / off if off else float('nan'):16.3f}")
    cost = redraw_cost_ms()
    print(f"\none redraw (8 × 8 grid, status line): {cost:.2f} ms; at {REDRAW_HZ:g} Hz {cost * REDRAW_HZ / 10:.2f} % of one core at most")


if __name__ == "__main__":
    main()
