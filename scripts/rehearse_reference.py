#!/usr/bin/env python3
"""Rehearse the reference report on its fitted sim profile and compare every number with it.

Runs the reference matrix (vLLM, Qwen3.8-Flash-Next, 4x H200: shared/reference/) through the real
command line on configs/sim-h200x4-qwen3.8-flash-next.toml, then prints, per cell, the reference
and the measured total tok/s and TTFT, their ratios, and PASS/MISS against the bar (10 %); exits 1
if any cell misses (a number off, or a status other than the reference's), 2 on bad input.

    python scripts/rehearse_reference.py                          # the whole matrix, 30 s windows (~25 min)
    python scripts/rehearse_reference.py --duration 5             # the same cells, 5 s windows (~10 min)
    python scripts/rehearse_reference.py --cells 8K:1,8K:128,251K:16 --prefill 8K,64K --duration 3

The sim's rates and TTFT don't depend on the window's length (docs/sim.md), so a short window
measures the same numbers. Without --cells the whole config runs as one run, as a user would run it;
with --cells there is one run per context (exactly the cells asked for) and one for the prefill
probes. ``--fast-warmup`` makes cold prefill near-instant in the decode runs (their numbers don't
depend on it: after warm-up only a prompt's last block is computed) so that warming 128 distinct
prompts doesn't cost real minutes; the prefill probes always run on the profile as fitted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fidelity"))

from reference_numbers import Reference, find_reference, load_reference  # noqa: E402 (found through the sys.path line above)

CONFIG = ROOT / "configs" / "sim-h200x4-qwen3.8-flash-next.toml"
PROFILE = "h200x4-qwen3.8-flash-next"
MEASURED = ("valid", "client_bound")  # client_bound cells still carry their numbers (docs/metrics.md)


@dataclass
class Row:
    kind: str  # decode | prefill
    context: str
    concurrency: int | None
    ref_status: str
    status: str | None
    ref_tps: float | None = None  # decode: total tok/s; prefill: prompt tok/s
    tps: float | None = None
    ref_ttft_ms: float | None = None
    ttft_ms: float | None = None
    ref_per_request_tps: float | None = None
    per_request_tps: float | None = None
    ref_tbt_ms: float | None = None
    tbt_ms: float | None = None
    verdict: str = "MISS"
    note: str = ""

    @property
    def tps_ratio(self) -> float | None:
        return _ratio(self.tps, self.ref_tps)

    @property
    def ttft_ratio(self) -> float | None:
        return _ratio(self.ttft_ms, self.ref_ttft_ms)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def label(tokens: int) -> str:
    return f"{tokens // 1024}K" if tokens % 1024 == 0 else str(tokens)


def parse_context(text: str) -> int:
    t = text.strip().upper()
    return int(t[:-1]) * 1024 if t.endswith("K") else int(t)


def parse_cells(text: str, ref: Reference) -> list[tuple[int, int]]:
    """``8K:1,8K:128`` (or ``all``) -> [(8192, 1), (8192, 128)], each a cell of the reference matrix."""
    if text.strip().lower() == "all":
        return sorted(ref.cells)
    cells = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        ctx, sep, n = item.partition(":")
        if not sep:
            raise ValueError(f"--cells {item!r}: expected CONTEXT:N, e.g. 8K:16")
        cell = (parse_context(ctx), int(n))
        if cell not in ref.cells:
            raise ValueError(f"--cells {item!r}: not a cell of the reference matrix")
        cells.append(cell)
    if not cells:
        raise ValueError("--cells: no cells given")
    return sorted(set(cells))


def parse_prefill(text: str, ref: Reference) -> list[int]:
    if text.strip().lower() == "all":
        return sorted(ref.prefill)
    if text.strip().lower() == "none":
        return []
    out = []
    for item in (s.strip() for s in text.split(",") if s.strip()):
        c = parse_context(item)
        if c not in ref.prefill:
            raise ValueError(f"--prefill {item!r}: not a prefill context of the reference")
        out.append(c)
    return sorted(set(out))


def _labels(values: list[int]) -> str:
    return json.dumps([label(v) for v in values])


def plan_runs(cells: list[tuple[int, int]] | None, prefill: list[int], duration: float | None,
              fast_warmup: bool, whole: bool) -> list[list[str]]:  # fmt: skip
    """The ``--set`` overrides of each CLI run."""
    # The reference was measured in lockstep (every stream's first request as long as the rest): so is its rehearsal.
    # Staggered first requests (docs/metrics.md) shorten most streams' first request, and in a few-second window the
    # 32K x 64 cell's loop (after 32 tokens, planned at admission) never shows in them.
    common = ["matrix.stagger=false"] + ([] if duration is None else [f"matrix.duration_s={duration:g}"])
    if whole and not fast_warmup:  # the config as it stands: every prefill context and every cell, in one run
        return [list(common)]
    if whole:  # the prefill probes on the profile as fitted, then every decode cell with fast warm-ups
        return [[*common, "matrix.contexts=[]"], [*common, "matrix.prefill_contexts=[]", _fast_profile()]]
    runs = []
    if prefill:
        runs.append([*common, "matrix.contexts=[]", f"matrix.prefill_contexts={_labels(prefill)}"])
    by_ctx: dict[int, list[int]] = defaultdict(list)
    for ctx, n in cells or []:
        by_ctx[ctx].append(n)
    for ctx, ns in sorted(by_ctx.items()):
        sets = [*common, "matrix.prefill_contexts=[]", f"matrix.contexts={_labels([ctx])}", f"matrix.concurrency={json.dumps(sorted(ns))}"]
        if fast_warmup:
            sets.append(_fast_profile())
        runs.append(sets)
    return runs


def _fast_profile() -> str:
    # Cold prefill at ~1M tokens/ms: warm-ups take no time; a cached prompt's last block still costs ~0.
    return f'engine.profile={{base = "{PROFILE}", prefill_table = [[1000000, 1.0]]}}'


def run_cli(config: Path, db: Path, sets: list[str], log: Path, timeout: float | None) -> int:
    cmd = [sys.executable, "-m", "infermatrix", "run", str(config), "--db", str(db)]
    for s in sets:
        cmd += ["--set", s]
    with log.open("ab") as fh:
        fh.write(("\n$ " + " ".join(cmd) + "\n").encode())
        fh.flush()
        proc = subprocess.run(cmd, check=False, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, timeout=timeout,
                              env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    return proc.returncode


def collect(db: Path) -> tuple[dict[tuple[int, int], dict], dict[int, dict]]:
    """Every cell and prefill row of every run in ``db`` (later runs win)."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        have = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        if not {"cells", "prefill_list"} <= have:
            raise ValueError(f"{db} holds no infermatrix results (no cells table or prefill_list view)")
        cells = {}
        for row in con.execute(
            "SELECT context_tokens, concurrency, status, total_tps, per_request_tps, ttft_ms, tbt_ms, avg_active, reason, "
            "flags FROM cells ORDER BY started_at NULLS FIRST"
        ).fetchall():
            ctx, n, status, total, per, ttft, tbt, active, reason, flags = row
            cells[(ctx, n)] = {"status": status, "total_tps": total, "per_request_tps": per, "ttft_ms": ttft,
                               "tbt_ms": tbt, "avg_active": active, "reason": reason,
                               "flags": json.loads(flags) if isinstance(flags, str) else (flags or {})}  # fmt: skip
        prefill = {}
        # the prefill table, not prefill_list: a client_bound point keeps its numbers there (the view shows valid ones only)
        for ctx, status, tps, ttft, prompt_tokens, reason in con.execute(
            "SELECT context_tokens, status, prompt_tps, ttft_ms, prompt_tokens, reason FROM prefill"
        ).fetchall():
            prefill[ctx] = {"status": status, "prompt_tps": tps, "ttft_ms": ttft, "prompt_tokens": prompt_tokens, "reason": reason}
        return cells, prefill
    finally:
        con.close()


def compare(ref: Reference, cells: list[tuple[int, int]], prefill: list[int], got_cells: dict, got_prefill: dict,
            tolerance: float) -> list[Row]:  # fmt: skip
    rows = []
    for ctx in prefill:
        r = ref.prefill[ctx]
        g = got_prefill.get(ctx)
        row = Row("prefill", label(ctx), None, "valid", g["status"] if g else None, ref_tps=r.prompt_tps,
                  tps=g["prompt_tps"] if g else None, ref_ttft_ms=r.ttft_ms, ttft_ms=g["ttft_ms"] if g else None)  # fmt: skip
        if g is None:
            row.note = "not measured"
        elif g["status"] not in MEASURED:
            row.note = f"status {g['status']}"
        else:  # client_bound: the client held too many probes; the numbers are still measured, and compared, as a cell's
            ok = all(x is not None and abs(x - 1) <= tolerance for x in (row.tps_ratio, row.ttft_ratio))
            row.verdict = "PASS" if ok else "MISS"
            if g["status"] == "client_bound":
                row.note = f"client_bound: {g['reason']}"
        rows.append(row)
    for key in cells:
        r = ref.cells[key]
        g = got_cells.get(key)
        row = Row("decode", r.context_label, r.concurrency, r.status, g["status"] if g else None)
        if g is None:
            row.note = "not measured"
        elif r.status != "valid":
            row.verdict = "PASS" if g["status"] == r.status else "MISS"
            if g["status"] != r.status:
                row.note = f"expected {r.status}" + (f" ({g['reason']})" if g.get("reason") else "")
        else:
            row.ref_tps, row.ref_ttft_ms = r.total_tps, r.ttft_ms
            row.ref_per_request_tps, row.ref_tbt_ms = r.per_request_tps, r.tbt_ms
            if g["status"] in MEASURED:
                row.tps, row.ttft_ms = g["total_tps"], g["ttft_ms"]
                row.per_request_tps, row.tbt_ms = g["per_request_tps"], g["tbt_ms"]
                ok = all(x is not None and abs(x - 1) <= tolerance for x in (row.tps_ratio, row.ttft_ratio))
                row.verdict = "PASS" if ok else "MISS"
                if g["status"] == "client_bound":
                    why = "; ".join((g["flags"].get("client") or {}).get("why") or [])
                    row.note = "client_bound" + (f": {why}" if why else "")
            else:
                row.note = f"status {g['status']}" + (f": {g['reason']}" if g.get("reason") else "")
        rows.append(row)
    return rows


def _f(v: float | None, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


def render(rows: list[Row], tolerance: float) -> str:
    head = (f"{'cell':<13} {'status':<14} {'ref tok/s':>10} {'tok/s':>10} {'ratio':>6}  {'ref TTFT':>9} {'TTFT':>9} {'ratio':>6}"
            f"  {'per-req':>13} {'TBT ms':>11}  verdict")  # fmt: skip
    lines = [head, "-" * len(head)]
    for r in rows:
        cell = f"prefill {r.context}" if r.kind == "prefill" else f"{r.context} x {r.concurrency}"
        per = "" if r.ref_per_request_tps is None else f"{_f(r.per_request_tps, '.1f')}/{r.ref_per_request_tps:.1f}"
        tbt = "" if r.ref_tbt_ms is None else f"{_f(r.tbt_ms, '.1f')}/{r.ref_tbt_ms:.1f}"
        lines.append(
            f"{cell:<13} {(r.status or '—'):<14} {_f(r.ref_tps, ',.1f'):>10} {_f(r.tps, ',.1f'):>10} {_f(r.tps_ratio, '.3f'):>6}  "
            f"{_f(r.ref_ttft_ms, ',.0f'):>9} {_f(r.ttft_ms, ',.0f'):>9} {_f(r.ttft_ratio, '.3f'):>6}  {per:>13} {tbt:>11}  "
            f"{r.verdict}{'  ' + r.note if r.note else ''}"
        )
    misses = sum(r.verdict != "PASS" for r in rows)
    lines.append("-" * len(head))
    lines.append(f"{len(rows) - misses} of {len(rows)} cells within {tolerance:.0%} of the reference (total tok/s and TTFT; "
                 f"prompt tok/s and TTFT for prefill; exact status otherwise); {misses} missed")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", help="CONTEXT:N,... of the reference matrix, or 'all' (default: the whole config in one run)")
    ap.add_argument("--prefill", default=None, help="prefill contexts (8K,64K), 'all' or 'none' (default: all without --cells, none with)")
    ap.add_argument("--duration", type=float, default=None, help="seconds per decode window (default: the config's, 30)")
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--reference", type=Path, default=None, help="the reference text file (default: shared/reference/)")
    ap.add_argument("--db", type=Path, default=None, help="results database (default: a temporary one)")
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--fast-warmup", action="store_true", help="near-instant cold prefill in the decode runs (see above)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    ap.add_argument("--timeout", type=float, default=None, help="seconds allowed per CLI run")
    ap.add_argument("--no-run", action="store_true", help="only compare what --db already holds")
    ap.add_argument("--retries", type=int, default=0, help="measure missed cells that were client_bound (or failed) again, up to this many times")
    args = ap.parse_args(argv)

    try:
        ref = load_reference(args.reference)
        whole = args.cells is None
        cells = sorted(ref.cells) if whole else parse_cells(args.cells, ref)
        prefill_arg = args.prefill if args.prefill is not None else ("all" if whole else "none")
        prefill = parse_prefill(prefill_arg, ref)
        if whole and prefill_arg != "all":
            whole = False  # a subset of the prefill list: run per context instead
    except (ValueError, FileNotFoundError) as exc:
        print(f"rehearse_reference: {exc}", file=sys.stderr)
        return 2
    if args.duration is not None and args.duration <= 0:
        print("rehearse_reference: --duration must be positive", file=sys.stderr)
        return 2

    if args.no_run and (args.db is None or not args.db.exists()):
        print("rehearse_reference: --no-run needs an existing --db", file=sys.stderr)
        return 2
    tmp = tempfile.TemporaryDirectory(prefix="rehearse-")
    db = args.db or Path(tmp.name) / "rehearsal.duckdb"
    log = db.with_suffix(".log")
    runs = [] if args.no_run else plan_runs(cells, prefill, args.duration, args.fast_warmup, whole)
    print(f"reference: {args.reference or find_reference()}\nconfig: {args.config}\ndatabase: {db}\nlog: {log}", flush=True)
    t0 = time.monotonic()
    failed = []
    for i, sets in enumerate(runs, 1):
        t = time.monotonic()
        rc = run_cli(args.config, db, sets, log, args.timeout)
        what = " ".join(s for s in sets if s.startswith(("matrix.contexts", "matrix.prefill", "matrix.concurrency")))
        print(f"run {i}/{len(runs)}: exit {rc} in {time.monotonic() - t:.0f} s  {what or '(whole config)'}", flush=True)
        if rc != 0:
            failed.append((i, rc))
    try:
        got_cells, got_prefill = collect(db) if db.exists() else ({}, {})
    except ValueError as exc:
        print(f"rehearse_reference: {exc}", file=sys.stderr)
        return 2
    rows = compare(ref, cells, prefill, got_cells, got_prefill, args.tolerance)
    for attempt in range(args.retries if not args.no_run else 0):
        # A cell the client couldn't keep up with (another process on the machine, a GC pause) says so:
        # measure it again rather than blame the profile. Other misses stand.
        again = [(parse_context(r.context), r.concurrency) for r in rows
                 if r.kind == "decode" and r.verdict != "PASS" and r.status in ("client_bound", "error", None)]
        again_pf = [parse_context(r.context) for r in rows if r.kind == "prefill" and r.verdict != "PASS" and r.status != "valid"]
        if not again and not again_pf:
            break
        print(f"retry {attempt + 1}: {', '.join(f'{label(c)}x{n}' for c, n in again) or ''} "
              f"{' '.join('prefill ' + label(c) for c in again_pf)}", flush=True)
        for sets in plan_runs(again, again_pf, args.duration, args.fast_warmup, whole=False):
            rc = run_cli(args.config, db, sets, log, args.timeout)
            if rc != 0:
                failed.append(("retry", rc))
        got_cells, got_prefill = collect(db)
        rows = compare(ref, cells, prefill, got_cells, got_prefill, args.tolerance)
    print()
    print(render(rows, args.tolerance))
    print(f"\n{len(runs)} run(s) in {time.monotonic() - t0:.0f} s" + (f"; failed runs: {failed} (see {log})" if failed else ""))
    if args.json:
        args.json.write_text(json.dumps([{**asdict(r), "tps_ratio": r.tps_ratio, "ttft_ratio": r.ttft_ratio} for r in rows], indent=1))
    if args.db is None and (failed or any(r.verdict != "PASS" for r in rows)):
        keep = Path(tempfile.gettempdir()) / f"rehearse-{int(time.time())}"
        keep.mkdir(exist_ok=True)
        for p in (db, log):
            if p.exists():
                p.replace(keep / p.name)
        print(f"kept the database and log in {keep}")
    tmp.cleanup()
    return 1 if failed or any(r.verdict != "PASS" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
