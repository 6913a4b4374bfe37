"""Did the engine run N? The cell's concurrency judged from the engine's own gauges, not the client.

The client's in-flight count includes requests the server holds in its queue, so a server that seats
fewer than N (a max-sequences limit, a KV cache that holds fewer) looks like N from outside. Where the
engine reports its running / waiting gauges (``EngineTraits.metrics``), a cell is ``admission_limited``
(numbers kept in ``cells``, not shown as valid) when:

* its preemption counter moved during the cell (requests were evicted and recomputed), or
* the engine never ran N at once (the most it reported, before and inside the window, is below N), or
* its mean running inside the window is below ``RUNNING_FLOOR`` × N *and* it held requests waiting in
  most window samples — so the client's own restart gaps (a stream between two requests; nothing
  waits) never count against the engine.

Without gauges nothing is judged, and the cell's flags say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["RUNNING_FLOOR", "WAITING_SHARE", "EngineSample", "Admission", "judge_admission"]

RUNNING_FLOOR = 0.95
WAITING_SHARE = 0.5  # share of window samples with requests waiting that makes a shortfall the engine's


@dataclass
class EngineSample:
    t: float
    running: float
    waiting: float | None


@dataclass
class Admission:
    checked: bool
    limited: bool = False
    reason: str | None = None
    ran_at_most: float | None = None
    running_mean: float | None = None
    flags: dict[str, Any] = field(default_factory=dict)


def judge_admission(
    n: int, gauges_found: bool, steady_best: float | None, samples: list[EngineSample],
    preemptions_before: float | None, preemptions_after: float | None,
) -> Admission:
    """The verdict, and what it was judged from (stored in ``cells.flags.admission``)."""
    if not gauges_found or (not samples and steady_best is None):
        why = "engine metrics not found" if not gauges_found else "the engine's running gauge never answered"
        return Admission(checked=False, flags={"checked": False, "why": f"{why}: whether the engine ran {n} at once was not checked"})
    seen = [s.running for s in samples] + ([steady_best] if steady_best is not None else [])
    ran_at_most = max(seen)
    mean = sum(s.running for s in samples) / len(samples) if samples else None
    waits = [s for s in samples if s.waiting is not None]
    waiting_share = sum(1 for s in waits if s.waiting and s.waiting > 0) / len(waits) if waits else None
    preempted = (
        preemptions_after - preemptions_before
        if preemptions_before is not None and preemptions_after is not None else None
    )  # fmt: skip
    reasons = []
    if preempted:
        reasons.append(f"the engine preempted {preempted:g} requests during the cell")
    if ran_at_most < n:
        reasons.append(f"the engine ran at most {ran_at_most:g} of {n} at once")
    elif mean is not None and mean < RUNNING_FLOOR * n and (waiting_share or 0) >= WAITING_SHARE:
        reasons.append(f"the engine ran {mean:.1f} of {n} on average and held requests waiting")
    flags = {
        "checked": True, "ran_at_most": ran_at_most, "running_mean": None if mean is None else round(mean, 3),
        "waiting_share": None if waiting_share is None else round(waiting_share, 3), "samples": len(samples),
        "preemptions": preempted, "limited": bool(reasons),
    }  # fmt: skip
    if reasons and mean is not None:
        reasons[-1] += f" (mean {mean:.1f} running in the window)"
    return Admission(checked=True, limited=bool(reasons), reason="; ".join(reasons) or None,
                     ran_at_most=ran_at_most, running_mean=mean, flags=flags)  # fmt: skip
