#!/usr/bin/env python3
"""The client verdict's span rule against the sim's own record: does ``client_bound`` bind when, and only when,
the client's timing error could exceed the 1 % the report promises? (issue 27; docs/performance.md, "Client verdict
calibration").

    .venv/bin/python scripts/calibrate_verdict.py [--outputs 8,16,32,64] [--concurrency 1,2,4,16] [--duration 4]
                                                  [--burners 0] [--profile tiny]

It starts a sim, and for each output length runs the real ``infermatrix run`` (in this process, so the verdict's
inputs -- every request's stamps and the loop-lag ticks -- can be kept) over the concurrencies, one 1K context.
For every cell it prints the verdict; the span rule's share before issue 27 (``old``: every tick's whole lag at
each request's first and last in-window chunks, summed) and now (``span_lag_share`` as stored); the rates' error
against the sim's record of the same window (``/debug/window``), and per_request_tps against the sim's emissions
by the client's own definition (its first arrival grouped as metrics.request_rate groups it: the sim, behind its
step clock on a loaded machine, emits catch-up bursts whose chunks the client rightly groups); and the stamps' own
error: each request's two rate stamps against the sim's emission of the same token (``/debug/truth``), Σ of (last
delay − first delay) over Σ spans, as the rate's signed error. With ``--burners K`` it keeps K busy-loop processes
running for the whole run (a loaded machine).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import httpx

import infermatrix.core.measure.cell as cell_mod
from infermatrix.cli import main as cli_main
from infermatrix.core.measure.metrics import ARRIVAL_GROUP_S
from infermatrix.core.measure.selfcheck import lag_at_ms
from infermatrix.core.types import RequestRecord

KEEP: Path | None = None
_ID = re.compile(r"-(\d+)-(\d+)-s(\d+)-r(\d+)$")


def start_sim(profile: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "infermatrix", "sim", "serve", "--profile", profile, "--port", str(port)],
                                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    for _ in range(300):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGTERM)
    raise SystemExit("the sim did not start")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def first_after_group(stamps: list[tuple[float, int]]) -> int:
    """The index of the first arrival's last chunk, as metrics.request_rate groups (ARRIVAL_GROUP_S)."""
    first = 0
    while first + 1 < len(stamps) and stamps[first + 1][0] - stamps[0][0] <= ARRIVAL_GROUP_S:
        first += 1
    return first


def through(events: list[tuple[float, int]] | list[list[float]], ws: float, we: float) -> list[tuple[float, int]]:
    """(stamp, tokens so far) of each in-window chunk or emission."""
    cum, seen = 0, []
    for t, n in events:
        cum += int(n)
        if ws <= t <= we:
            seen.append((t, cum))
    return seen


def emitted_at(emissions: list[list[float]], tokens: int) -> float | None:
    """When the server emitted the token that brought the request to ``tokens``."""
    cum = 0
    for t, n in emissions:
        cum += int(n)
        if cum >= tokens:
            return t
    return None


def old_share(records: list[RequestRecord], ws: float, we: float, ticks: list[tuple[float, float]]) -> float | None:
    """The span rule before issue 27: every tick's whole lag at both of each request's first and last in-window
    chunks, summed, over the spans between those chunks."""
    late = total = 0.0
    for r in records:
        inside = [t for t, _ in r.events if ws <= t <= we]
        if len(inside) >= 2 and inside[-1] > inside[0]:
            total += inside[-1] - inside[0]
            late += (lag_at_ms(ticks, inside[0]) + lag_at_ms(ticks, inside[-1])) / 1000
    return late / total if total > 0 else None


def stamp_truth(records: list[RequestRecord], window: tuple[float, float], truth: dict[tuple[int, int, int], Any],
                n: int, ticks: list[tuple[float, float]]) -> dict[str, float | None]:  # fmt: skip
    """The real error of the cell's rate stamps against the server's emissions of the same tokens, the server's rate by
    the client's definition (its first arrival grouped as the client groups it), and the old rule's share."""
    ws, we = window
    span = err = 0.0
    worst_first = worst_last = 0.0
    s_tokens, s_span = 0, 0.0
    for r in records:
        srv = truth.get((n, r.stream_index, r.seq))
        if srv is None:
            continue
        em = through(srv["emissions"], ws, we)
        k = first_after_group(em)
        if len(em) - k >= 2 and em[-1][0] > em[k][0]:
            s_tokens += em[-1][1] - em[k][1]
            s_span += em[-1][0] - em[k][0]
        seen = through(r.events, ws, we)
        f = first_after_group(seen)
        if len(seen) - f < 2 or seen[-1][0] <= seen[f][0]:
            continue
        (tf, cf), (tl, cl) = seen[f], seen[-1]
        ef, el = emitted_at(srv["emissions"], cf), emitted_at(srv["emissions"], cl)
        if ef is None or el is None:
            continue
        df, dl = tf - ef, tl - el
        span += tl - tf
        err += dl - df
        worst_first, worst_last = max(worst_first, df), max(worst_last, dl)
    return {"real": err / span if span > 0 else None, "old": old_share(records, ws, we, ticks),
            "same_def_tps": s_tokens / s_span if s_span > 0 else None,
            "worst_first_ms": 1000 * worst_first, "worst_last_ms": 1000 * worst_last}  # fmt: skip


def run_outputs(base: str, out: int, concurrency: str, duration: float, tmp: Path) -> list[dict[str, Any]]:
    """One `infermatrix run` over the concurrencies at ``out`` tokens a request; each cell's row, verdict inputs,
    the sim's window record and the real stamp errors."""
    httpx.post(f"{base}/debug/reset", timeout=30)
    seen: dict[int, tuple[list[RequestRecord], tuple[float, float], list[tuple[float, float]]]] = {}
    real_verdict = cell_mod.client_verdict

    def keep(n: int, records: list[RequestRecord], window: tuple[float, float], **kw: Any) -> Any:
        seen[n] = (list(records), window, list(kw.get("ticks") or []))
        return real_verdict(n, records, window, **kw)

    db = tmp / f"out{out}.duckdb"
    sys.argv = ["infermatrix", "run", "--engine", "sim", "--base-url", base, "--contexts", "1K", "--concurrency", concurrency,
                "--duration", str(duration), "--max-output", str(out), "--db", str(db)]  # fmt: skip
    cell_mod.client_verdict = keep  # type: ignore[assignment]
    quiet = open(tmp / f"out{out}.log", "w")  # the run's own console output, kept beside its database
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            cli_main()
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
    finally:
        cell_mod.client_verdict = real_verdict  # type: ignore[assignment]
        quiet.close()
    truth: dict[tuple[int, int, int], Any] = {}
    for req in httpx.get(f"{base}/debug/truth", timeout=120).json()["requests"]:
        m = _ID.search(req.get("request_id") or "")
        if m and "-decode-" in req["request_id"]:
            truth[(int(m.group(2)), int(m.group(3)), int(m.group(4)))] = req
    with duckdb.connect(str(db), read_only=True) as con:
        cols = ["concurrency", "status", "reason", "total_tps", "per_request_tps", "tbt_ms", "window_start", "window_end", "flags"]
        rows = [dict(zip(cols, r)) for r in con.execute(f"SELECT {', '.join(cols)} FROM cells ORDER BY concurrency").fetchall()]
    for row in rows:
        n = row["concurrency"]
        w = httpx.get(f"{base}/debug/window", params={"start": row["window_start"], "end": row["window_end"]}, timeout=60).json()
        row["truth"] = w
        if n in seen:
            records, window, ticks = seen[n]
            row["stamps"] = stamp_truth(records, window, truth, n, ticks)
            if KEEP is not None:  # the verdict's inputs and the sim's record of the cell, to try other rules on later
                mine = {k: v for k, v in truth.items() if k[0] == n}
                with open(KEEP / f"cell-{out}-{n}-{int(time.time())}.pickle", "wb") as fh:
                    pickle.dump({"out": out, "n": n, "records": records, "window": window, "ticks": ticks, "truth": mine,
                                 "row": {k: v for k, v in row.items() if k != "truth"}}, fh)  # fmt: skip
    return rows


def pct(a: float | None, b: float | None) -> str:
    return "—" if a is None or not b else f"{100 * (a / b - 1):+.2f}"


def print_rows(out: int, rows: list[dict[str, Any]]) -> None:
    import json

    for r in rows:
        flags = json.loads(r["flags"]) if r["flags"] else {}
        c, w, s = flags.get("client") or {}, r["truth"], r.get("stamps") or {}
        share, old = c.get("span_lag_share"), s.get("old")
        tbt_truth = 1000 / w["per_request_tps"] if w.get("per_request_tps") else None
        real = "—" if s.get("real") is None else f"{-100 * s['real']:+.2f}"  # a span too long is a rate too low
        print(f"| {out} | {r['concurrency']} | {r['status']} | {'—' if old is None else f'{100 * old:.2f}'} | "
              f"{'—' if share is None else f'{100 * share:.2f}'} | {pct(r['total_tps'], w.get('total_tps'))} | "
              f"{pct(r['per_request_tps'], w.get('per_request_tps'))} | {pct(r['per_request_tps'], s.get('same_def_tps'))} | "
              f"{pct(r['tbt_ms'], tbt_truth)} | {real} | {s.get('worst_first_ms', 0):.1f} / {s.get('worst_last_ms', 0):.1f} | "
              f"{(c.get('window') or {}).get('lag_p50_ms')} / {(c.get('window') or {}).get('lag_p99_ms')} | {(r['reason'] or '')[:70]} |",
              flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--outputs", default="8,16,32,64")
    ap.add_argument("--concurrency", default="1,2,4,16")
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--burners", type=int, default=0, help="busy-loop processes kept running for the whole run")
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--keep", type=Path, help="also write each cell's verdict inputs and the sim's record there (pickle)")
    args = ap.parse_args()
    global KEEP
    KEEP = args.keep
    if KEEP is not None:
        KEEP.mkdir(parents=True, exist_ok=True)
    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="calib-verdict-"))
    sim = start_sim(args.profile, port, tmp / "sim.log")
    burners = [subprocess.Popen([sys.executable, "-c", "while 1: pass"], start_new_session=True) for _ in range(args.burners)]
    base = f"http://127.0.0.1:{port}"
    try:
        print(f"load average before: {os.getloadavg()[0]:.2f}; burners: {args.burners}", flush=True)
        print("| out | N | status | old share % | span_lag_share % | total % | per-request % | per-request, same def. % | "
              "tbt % | stamps' own % | worst first / last delay ms | lag p50 / p99 ms | reason |")  # fmt: skip
        print("|" + "---|" * 13)
        for out in (int(x) for x in args.outputs.split(",")):
            print_rows(out, run_outputs(base, out, args.concurrency, args.duration, tmp))
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        for p in burners:
            os.killpg(p.pid, signal.SIGTERM)
        os.killpg(sim.pid, signal.SIGTERM)
        sim.wait(timeout=30)


if __name__ == "__main__":
    main()
