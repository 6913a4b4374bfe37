"""The sim's own record of one stretch of time (``GET /debug/window?start=&end=``): what the engine did,
summarised server-side so a test needs no megabytes of per-token emissions to judge a 256-stream cell.

Times are the sim's ``time.monotonic()``: the client's clock too when both run on one host (loopback), so a
cell's stored ``[window_start, window_end]`` selects the same stretch here. Definitions follow docs/metrics.md:

* ``mean_batch``: the decode batch (sequences in the step), time-weighted over the steps' overlap with the
  window; idle time counts as 0.
* ``mean_held``: requests inside the engine (from their receipt to their end), time-weighted: what the client
  kept there, whatever the engine's own intake and join latency.
* ``most_finished_in_a_step``: the most requests that finished at one step's end (N in lockstep).
* ``output_tokens`` / ``total_tps``: tokens emitted at step ends inside ``[start, end]``.
* ``per_request_tps``: token-weighted over in-window spans, as the client's ``per_request_tps`` (each
  request's first in-window emission leaves its tokens out: they took no measured time).
* ``requests``: every request received before ``end`` and not finished before ``start``: its receive, first
  token and finish times, tokens, ``max_tokens`` — no emissions (``/debug/truth`` has them).
"""

from __future__ import annotations

import time
from typing import Any

from infermatrix.plugins.sim.scheduler import Scheduler

__all__ = ["window_record"]


def window_record(sched: Scheduler, start: float, end: float) -> dict[str, Any]:
    span = end - start
    batch_s = 0.0
    steps = 0
    tokens = 0
    covered = 0.0
    for t0, dur, _planned, batch, n, _lag, _prefilled in sched.steps:
        t1 = t0 + dur
        overlap = min(t1, end) - max(t0, start)
        if overlap > 0:
            batch_s += batch * overlap
            covered += overlap
        if start <= t1 <= end:  # a step's tokens are emitted at its end
            steps += 1
            tokens += n
    rate_tokens, rate_span = 0, 0.0
    held_s = 0.0
    reqs: list[dict[str, Any]] = []
    for s in sched.records:
        if s.received is not None and s.received > end or (s.finished is not None and s.finished < start):
            continue
        if s.received is not None:  # inside the engine, from its receipt to its end (or the stretch's)
            held_s += max(0.0, min(s.finished if s.finished is not None else end, end) - max(s.received, start))
        em = s.emissions
        inside = [(em[i], int(em[i + 1])) for i in range(0, len(em), 2) if start <= em[i] <= end]
        if len(inside) >= 2 and inside[-1][0] > inside[0][0]:
            rate_tokens += sum(k for _, k in inside[1:])
            rate_span += inside[-1][0] - inside[0][0]
        reqs.append({
            "request_id": s.request_id, "received": s.received, "received_held_s": sched.loop_watch.held_s(s.received),
            "first_token": s.first_token, "finished": s.finished,
            "finish_reason": s.finish_reason, "max_tokens": s.max_tokens, "output_tokens": s.generated,
            "tokens_in_window": sum(k for _, k in inside),
        })  # fmt: skip
    return {
        "start": start, "end": end, "now": time.monotonic(),
        "steps": steps, "mean_batch": batch_s / span if span > 0 else None, "stepped_s": covered,
        "mean_held": held_s / span if span > 0 else None,
        "most_finished_in_a_step": _most_per_step(sched, start, end),
        "output_tokens": tokens, "total_tps": tokens / span if span > 0 else None,
        "per_request_tps": rate_tokens / rate_span if rate_span > 0 and rate_tokens > 0 else None,
        "received_in_window": sum(1 for r in reqs if r["received"] is not None and r["received"] >= start),
        "finished_in_window": sum(1 for r in reqs if r["finished"] is not None and r["finished"] <= end),
        "requests": reqs,
    }


def _most_per_step(sched: Scheduler, start: float, end: float) -> int:
    """The most requests that finished at one step end inside the stretch: N when N streams end in lockstep."""
    ends: dict[float, int] = {}
    for s in sched.records:
        if s.finished is not None and start <= s.finished <= end and s.finish_reason in ("length", "stop"):
            ends[s.finished] = ends.get(s.finished, 0) + 1
    return max(ends.values(), default=0)
