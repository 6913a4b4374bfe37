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

**Whose shortfall.** The engine can only run what the client sent. Each read of the engine's gauges (the
steady-state wait's and the window's) is paired with the client's own count of requests in flight at that
moment (``inflight.py``). When the engine never ran N, the client had fewer than N in flight at *every*
read (at the read's stamp, as the engine's sample is stamped), and the engine held nothing back (no requests waiting in
most reads; without a waiting gauge: it ran at least what the client had in flight), the shortfall is the
client's: ``client_short``, and the cell is ``client_bound``, not ``admission_limited``. A client that had
N in flight at some read, or an engine that queued what it was sent, leaves the verdict on the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from infermatrix.core.measure.inflight import InFlight
from infermatrix.core.types import CellResult

__all__ = ["RUNNING_FLOOR", "WAITING_SHARE", "EngineSample", "Admission", "judge_admission", "client_in_flight_flags", "settle_admission"]

RUNNING_FLOOR = 0.95
WAITING_SHARE = 0.5  # share of window samples with requests waiting that makes a shortfall the engine's
LAST_READS = 20  # reads kept side by side in cells.flags.client_in_flight.last_reads


@dataclass
class EngineSample:
    t: float
    running: float
    waiting: float | None
    client: InFlight | None = None  # the client's own in-flight count at this read (inflight.py)


@dataclass
class Admission:
    checked: bool
    limited: bool = False
    reason: str | None = None
    ran_at_most: float | None = None
    running_mean: float | None = None
    waiting_mean: float | None = None  # requests the engine held in its queue, averaged over the window's samples
    client_short: bool = False  # the engine ran fewer than N because the client sent fewer: client_bound
    client_reason: str | None = None
    flags: dict[str, Any] = field(default_factory=dict)


def judge_admission(
    n: int, gauges_found: bool, steady_best: float | None, samples: list[EngineSample],
    preemptions_before: float | None, preemptions_after: float | None, steady: Sequence[EngineSample] = (),
) -> Admission:
    """The verdict, and what it was judged from (stored in ``cells.flags.admission``). ``samples`` are the
    window's reads, ``steady`` the steady-state wait's (``steady_best`` is the most running among them)."""
    if not gauges_found or (not samples and steady_best is None):
        why = "engine metrics not found" if not gauges_found else "the engine's running gauge never answered"
        return Admission(checked=False, flags={"checked": False, "why": f"{why}: whether the engine ran {n} at once was not checked"})
    seen = [s.running for s in samples] + ([steady_best] if steady_best is not None else [])
    ran_at_most = max(seen)
    mean = sum(s.running for s in samples) / len(samples) if samples else None
    waits = [s for s in samples if s.waiting is not None]
    waiting_share = sum(1 for s in waits if s.waiting and s.waiting > 0) / len(waits) if waits else None
    waiting_mean = sum(s.waiting or 0.0 for s in waits) / len(waits) if waits else None
    preempted = (
        preemptions_after - preemptions_before
        if preemptions_before is not None and preemptions_after is not None else None
    )  # fmt: skip
    reasons = []
    client = _client_side(n, [*steady, *samples])
    client_short = False
    if preempted:
        reasons.append(f"the engine preempted {preempted:g} requests during the cell")
    if ran_at_most < n:
        if client is not None and client["short"] and not client["engine_held_back"]:
            client_short = True  # the engine ran what it was sent: the client's shortfall, not the engine's
        else:
            short = f", the client kept at most {client['at_most']} of {n} in flight" if client is not None and client["short"] else ""
            reasons.append(f"the engine ran at most {ran_at_most:g} of {n} at once{short}{_before_the_scheduler(client, n)}")
    elif mean is not None and mean < RUNNING_FLOOR * n and (waiting_share or 0) >= WAITING_SHARE:
        reasons.append(f"the engine ran {mean:.1f} of {n} on average and held requests waiting")
    flags = {
        "checked": True, "ran_at_most": ran_at_most, "running_mean": None if mean is None else round(mean, 3),
        "waiting_share": None if waiting_share is None else round(waiting_share, 3),
        "waiting_mean": None if waiting_mean is None else round(waiting_mean, 3), "samples": len(samples),
        "preemptions": preempted, "limited": bool(reasons), "client_short": client_short and not reasons,
    }  # fmt: skip
    if reasons and mean is not None:
        reasons[-1] += f" (mean {mean:.1f} running in the window)"
    client_reason = None
    if client_short and not reasons and client is not None:
        client_reason = (f"the client kept at most {client['at_most']} of {n} requests in flight when the engine was read "
                         f"(mean {client['mean']:.1f}); the engine ran what it was sent (at most {ran_at_most:g}"
                         f"{', nothing waiting in most reads' if client['waiting_known'] else ''})")  # fmt: skip
    return Admission(checked=True, limited=bool(reasons), reason="; ".join(reasons) or None,
                     ran_at_most=ran_at_most, running_mean=mean, waiting_mean=waiting_mean, flags=flags,
                     client_short=client_reason is not None, client_reason=client_reason)  # fmt: skip


def _before_the_scheduler(client: dict[str, Any] | None, n: int) -> str:
    """Where the rest were, when the engine's own queue was empty: the client had N in flight at some read (else the
    shortfall would be the client's) while the engine's waiting gauge read 0 in most reads, so what was sent beyond
    what ran had not reached its scheduler — its HTTP front end or tokenizer held it. Said only with a waiting gauge."""
    if client is None or client["short"] or not client["waiting_known"] or client["engine_held_back"]:
        return ""
    return (f"; its queue was empty in most reads while the client had {n} in flight: the rest were held before its "
            f"scheduler (its HTTP front end or tokenizer)")


def client_in_flight_flags(n: int, samples: Sequence[EngineSample]) -> dict[str, Any] | None:
    """The client's in-flight figures over the reads that have them (``cells.flags.client_in_flight``)."""
    side = _client_side(n, samples)
    return None if side is None else {k: v for k, v in side.items() if k not in ("engine_held_back", "waiting_known")}


def _client_side(n: int, samples: Sequence[EngineSample]) -> dict[str, Any] | None:
    """The client's count at the engine's reads, and whether the engine held back any of what it was sent."""
    paired = [(s, s.client) for s in samples if s.client is not None]
    if not paired:
        return None
    # The client's count at the read's stamp (the middle of the /metrics request), as the engine's sample is
    # stamped: under a starved client a read can take hundreds of ms, and its span's extremes say little.
    at_most = max(c.at for _, c in paired)
    waits = [s for s, _ in paired if s.waiting is not None]
    if waits:  # queued what it was sent, in most reads
        held_back = sum(1 for s in waits if s.waiting and s.waiting > 0) / len(waits) >= WAITING_SHARE
    else:  # no waiting gauge: ran fewer than the client had in flight all through a read, in most reads
        held_back = sum(1 for s, c in paired if s.running < c.least) / len(paired) >= WAITING_SHARE
    return {
        "at_most": at_most, "mean": round(sum(c.at for _, c in paired) / len(paired), 3),
        "awaiting_first_mean": round(sum(c.awaiting_first for _, c in paired) / len(paired), 3),
        "reads": len(paired), "short_reads": sum(1 for _, c in paired if c.at < n),
        "short": at_most < n, "engine_held_back": held_back, "waiting_known": bool(waits),
        # The last reads side by side: [engine running, engine waiting, client in flight, client awaiting a first token].
        "last_reads": [[s.running, s.waiting, c.at, c.awaiting_first] for s, c in paired[-LAST_READS:]],
    }  # fmt: skip


def settle_admission(result: CellResult, verdict: Admission, reads: Sequence[EngineSample]) -> None:
    """The verdict written into the cell: its flags, ``avg_active`` as the engine ran it where the engine has a
    waiting gauge (the client's count less what the engine queued), and its status — the engine's shortfall
    (``admission_limited``) outranks the client's pace; a client that sent fewer than N makes a valid cell
    ``client_bound``. ``reads`` are every engine read paired with the client's count (the flags' ``client_in_flight``)."""
    n = result.concurrency
    result.flags["admission"] = verdict.flags
    result.flags["client_in_flight"] = client_in_flight_flags(n, reads)
    result.flags["client_active"] = result.avg_active
    result.flags["avg_active_source"] = "client"
    if verdict.waiting_mean is not None and result.avg_active is not None:
        # In flight as the client counts it, less what the engine held in its queue: what it ran. (Its running
        # gauge, sampled a few times a window, would add the noise of each stream's restart gap.)
        result.avg_active = max(0.0, result.avg_active - verdict.waiting_mean)
        result.flags["avg_active_source"] = "engine"
    if verdict.checked:
        result.flags["achieved_concurrency"] = verdict.ran_at_most
        result.flags["engine_running_mean"] = verdict.running_mean
    if verdict.limited:
        result.flags["admission_limited"] = True
        if result.status in ("valid", "client_bound"):
            result.status, result.reason = "admission_limited", verdict.reason
    elif verdict.client_short and result.status == "valid":
        result.status, result.reason = "client_bound", verdict.client_reason
