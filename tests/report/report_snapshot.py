"""Every report format of one database, written to files: a characterisation of what the reports say, to diff
before and after a change to core/report/ that must not change them (issue 28 item 4 used it).

    python tests/report/report_snapshot.py build DB        # a database with everything a report shows
    python tests/report/report_snapshot.py render DB DIR   # every format of every report of it, one file each
    diff -r BEFORE AFTER

The database is built once and rendered by both versions of the code: its run ids and times are its own, so two
builds would differ. The HTML footer's "generated at" minute is blanked.
"""

from __future__ import annotations

import io
import re
import sys
from functools import partial
from pathlib import Path

import orjson
from rich.console import Console

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "store")]

from imx_factories import REFERENCE_VALID, fill_run, make_cell  # noqa: E402
from test_report_load_sections import fill_load_run  # noqa: E402

from infermatrix.core import report  # noqa: E402
from infermatrix.core.slo import parse_slo  # noqa: E402
from infermatrix.core.store import Store  # noqa: E402
from infermatrix.core.store.slo_search import save_probe, save_search  # noqa: E402
from infermatrix.core.store.slo_store import save_gpu_hour_price, save_slos  # noqa: E402

SLOS = ("ttft_p99_ms=2000,tpot_p99_ms=12", "tpot_p90_ms=20")
WIDTHS = (200, 120, 80)  # the text report's wide, compact and one-line-per-measurement layouts
COUNTERS = {"spec_drafts": 100.0, "spec_draft_tokens": 300.0, "spec_accepted_tokens": 210.0, "spec_accepted_per_pos": [90.0, 70.0, 50.0],
            "prefix_cache_queries": 1000.0, "prefix_cache_hits": 400.0}  # fmt: skip


def build(db: Path) -> None:
    """Run A: the reference-like matrix and prefill (every status, a doubtful cell, engine counters), SLOs, a price, an
    SLO search, open-loop points, a trace replay and a workload pass. Run B: another engine, faster, fewer cells.
    Run C: a different method (duration), so compare warns."""
    with Store(db) as s:
        a, _, _ = fill_run(s, seed=1)
        s.con.execute("UPDATE cells SET flags = json_merge_patch(flags, ?) WHERE run_id = ? AND context_tokens = 8192 AND concurrency = 2",
                      [orjson.dumps({"client": {"client_bound": False, "why": [], "doubtful": {"ttft_ms": "client stalled 40 ms"}},
                                     "engine_counters": COUNTERS}).decode(), a])  # fmt: skip
        fill_load_run(s, a)
        b = s.create_run({"engine": "sglang", "model": "qwen", "hardware": {"gpu": "H100", "gpu_count": 8}})
        for key in REFERENCE_VALID:
            s.save_cell(b, make_cell(*key, seed=2, scale=1.3)[0])
        c, _, _ = fill_run(s, info={"duration_s": 10.0, "engine": "trt"}, seed=3, scale=0.8, other=False)
        for rid in (a, b):
            save_slos(s, rid, [parse_slo(x) for x in SLOS])
            save_gpu_hour_price(s, rid, 2.5)
        save_search(s, a, {"slo": SLOS[1], "over": "rate", "context_tokens": 1024, "arrival": "poisson", "start": 2.0,
                           "start_source": "stated", "resolution": "10%", "highest_pass": 3.0, "lowest_fail": 3.25, "status": "found"})  # fmt: skip
        for i, (load, verdict) in enumerate([(2.0, "pass"), (4.0, "fail"), (3.0, "pass"), (3.25, "fail")]):
            save_probe(s, a, {"probe": i, "step": "start" if i == 0 else "bisect", "load": load, "point": i, "status": "valid",
                              "meets": verdict == "pass", "verdict": verdict, "attainment": 1.0, "achieved": load})  # fmt: skip
        s.create_run({"engine": "sim", "status": "completed"})  # nothing measured
        print(a, b, c)


def _text(draw, width: int, colour: bool = False) -> str:
    out = io.StringIO()
    draw(Console(file=out, width=width, color_system="truecolor" if colour else None, force_terminal=colour))
    return out.getvalue()


def _html(page: str) -> str:
    return re.sub(r"at \d{4}-\d\d-\d\d \d\d:\d\d UTC from", "at TIME from", page)


def render(db: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with Store(db, read_only=True) as s:
        runs = [r["run_id"] for r in sorted(s.list_runs(), key=lambda r: r["started_at"])]
        a, b, c = runs[:3]
        empty = runs[3:]
        files: dict[str, str] = {}
        for name, rid in (("a", a), ("b", b), ("c", c), *((f"e{i}", r) for i, r in enumerate(empty))):
            for w in WIDTHS:
                files[f"report-{name}-{w}.txt"] = _text(partial(report.render_text, s, rid), w)
            files[f"report-{name}-200.ansi"] = _text(partial(report.render_text, s, rid), 200, colour=True)
            files[f"report-{name}.md"] = report.render_markdown(s, rid)
            files[f"report-{name}.html"] = _html(report.render_html(s, rid))
            files[f"report-{name}.json"] = orjson.dumps(report.render_json(s, rid), option=orjson.OPT_INDENT_2).decode()
        for name, ids in (("ab", [a, b]), ("abc", [a, b, c]), ("ca", [c, a])):
            for w in WIDTHS:
                files[f"compare-{name}-{w}.txt"] = _text(partial(report.render_compare_text, s, ids), w)
            files[f"compare-{name}-200.ansi"] = _text(partial(report.render_compare_text, s, ids), 200, colour=True)
            files[f"compare-{name}.md"] = report.render_compare_markdown(s, ids)
            files[f"compare-{name}.html"] = _html(report.render_compare_html(s, ids))
            files[f"compare-{name}.json"] = orjson.dumps(report.render_compare_json(s, ids), option=orjson.OPT_INDENT_2).decode()
    for name, text in files.items():
        (out / name).write_text(text)
    print(f"{len(files)} files in {out}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["build"]:
        build(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["render"]:
        render(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        sys.exit(__doc__)
