"""The comparison's Engine and GPU section (docs/telemetry.md): for each decode cell the baseline A and another run both
read telemetry in, what each engine said over the window (its own output tok/s, preemptions, held back) and, where
NVML read the GPUs in both, the joules per million output tokens — side by side with other/A. A plain ratio, no
verdict: the engine's rate is a second witness of total tok/s (whose verdict is the decode table's), and energy has no
interval yet."""

from __future__ import annotations

from typing import Any

from infermatrix.core.contexts import format_context
from infermatrix.core.report.compare_data import Comparison
from infermatrix.core.report.fmt import DASH, fmt_int, fmt_ratio, fmt_tps, fmt_yes
from infermatrix.core.report.model import Section, Table

__all__ = ["telemetry_compare_section", "telemetry_pairs"]


def telemetry_pairs(cmp: Comparison) -> list[tuple[str, tuple[int, int], dict[str, Any], dict[str, Any]]]:
    """(run B, cell, A's reads, B's reads) for every cell with telemetry in the baseline and in another run."""
    base = cmp.telemetry.get(cmp.baseline, {})
    return [(rid, key, base[key], tel[key]) for rid, tel in cmp.telemetry.items() if rid != cmp.baseline
            for key in sorted(tel) if key in base]  # fmt: skip


def _ratio(a: Any, b: Any) -> str:
    return fmt_ratio(b / a) if a and b is not None else DASH


def _get(t: dict[str, Any], part: str, key: str) -> Any:
    return (t.get(part) or {}).get(key)


def telemetry_compare_section(cmp: Comparison) -> Section | None:
    pairs = telemetry_pairs(cmp)
    if not pairs:
        return None
    a = cmp.letters[cmp.baseline]
    energy = any(ta.get("gpu") and tb.get("gpu") for _, _, ta, tb in pairs)
    header = ["Context", "N", "Run", f"Engine tok/s {a}", "Engine tok/s other", f"other/{a}", f"Preempted {a}", "Preempted other",
              f"Held back {a}", "Held back other"]  # fmt: skip
    if energy:
        header += [f"J / M tok {a}", "J / M tok other", f"other/{a}"]
    rows = []
    for rid, (ctx, n), ta, tb in pairs:
        ea, eb = _get(ta, "engine", "engine_tps"), _get(tb, "engine", "engine_tps")
        row = [format_context(ctx), str(n), cmp.letters[rid], fmt_tps(ea), fmt_tps(eb), _ratio(ea, eb),
               fmt_int(_get(ta, "engine", "preemptions")), fmt_int(_get(tb, "engine", "preemptions")),
               fmt_yes(_get(ta, "engine", "held_back")), fmt_yes(_get(tb, "engine", "held_back"))]  # fmt: skip
        if energy:
            ja, jb = _get(ta, "gpu", "j_per_mtok"), _get(tb, "gpu", "j_per_mtok")
            row += [fmt_int(ja), fmt_int(jb), _ratio(ja, jb)]
        rows.append(row)
    caption = (f"cells with telemetry in {a} and another run: the engine's own output tok/s over the window, its preemptions and "
               "whether it held the load back (preempted or queued while the client held N)"
               + ("; NVML's joules per million output tokens (lower is better)" if energy else "")
               + f"; other/{a} a plain ratio (the verdict on speed is the decode table's)")  # fmt: skip
    return Section("telemetry", "Engine and GPU", [Table(header, rows, "lrl" + "r" * (len(header) - 3), caption=caption, name="telemetry")])
