"""What the sim really did inside a cell's window, computed from its /debug/truth records.

The sim stamps emissions with time.monotonic(), the same system-wide clock the client uses, so the
client's stored window [window_start, window_end] selects the same tokens on both sides (up to the
loopback delivery delay, well under a millisecond).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from bars import LOOPBACK_MS


@dataclass
class CellTruth:
    total_tps: float
    per_request_tps: float | None
    tbt_ms: float | None
    output_tokens: int
    requests: int


def cell_truth(truth: dict, start: float, end: float) -> CellTruth:
    """The server-side numbers, by the same definitions as docs/metrics.md, over [start, end]: each
    request's emissions are the server's own step-end stamps (its step log), not what the client read."""
    total = 0
    rate_tokens, rate_span = 0, 0.0
    n_req = 0
    for req in truth["requests"]:
        inside = [(t, n) for t, n in req["emissions"] if start <= t <= end]
        if not inside:
            continue
        n_req += 1
        total += sum(n for _, n in inside)
        if len(inside) >= 2:
            span = inside[-1][0] - inside[0][0]
            toks = sum(n for _, n in inside[1:])
            if span > 0 and toks > 0:
                rate_tokens += toks
                rate_span += span
    rate = rate_tokens / rate_span if rate_span > 0 and rate_tokens > 0 else None
    return CellTruth(
        total_tps=total / (end - start),
        per_request_tps=rate,
        tbt_ms=None if not rate else 1000.0 / rate,
        output_tokens=total,
        requests=n_req,
    )


def rel_err(measured: float, truth: float) -> float:
    return abs(measured - truth) / truth


def decode_request_id(run_id: str, ctx: int, n: int, stream: int, seq: int) -> str:
    """The X-Request-Id the core sends for a decode cell's request (``{run}-decode-{context}-{n}-s{stream}-r{seq}``,
    measure/cell.py's ``id_prefix``): the key that joins a stored request to the sim's record of it."""
    return f"{run_id}-decode-{ctx}-{n}-s{stream}-r{seq}"


def receipt_ttft_ms(r: dict) -> tuple[float, float]:
    """A request's TTFT on the server's record, in ms, as a range: first token − receipt, and that plus how long the
    sim's own lateness may have held the receipt (``received_held_s``: docs/sim.md, "The sim's own lateness"). A client's
    TTFT, timed from its send, holds that wait; the sim's ``received`` does not."""
    ttft = (r["first_token"] - r["received"]) * 1000.0
    return ttft, ttft + r["received_held_s"] * 1000.0


def arrived(r: dict) -> float:
    """When a request reached the sim, on the host's monotonic clock: its receipt less the sim's own lateness at it
    (``received_held_s``: a sim waiting for a core reads a request late; docs/sim.md)."""
    return r["received"] - r["received_held_s"]


def stamp_lateness_ms(r: dict, sent: float, first_token: float) -> tuple[float, float]:
    """How late a client's two TTFT stamps were, in ms, as the sim's record of the same request shows: (send, read) —
    its request received after the client's ``sent``, beyond the sim's own lateness at the receipt
    (``received_held_s``), and its first token read after the sim emitted it (``first_token``: one clock). Both are
    time the client's TTFT holds and the server's does not; on an idle client, one loopback delivery each."""
    send = max(0.0, arrived(r) - sent)
    read = max(0.0, first_token - r["first_token"])
    return send * 1000.0, read * 1000.0


def check_mark_covers(late: list[tuple[float, float]], client: dict, per_send_ms: float) -> None:
    """Fails unless every request's stamp lateness (:func:`stamp_lateness_ms`: the server's measure) is within the bound
    the cell's client verdict stated for its TTFT stamps (``ttft_lag_bound_ms``) plus one loopback delivery, a send also
    ``per_send_ms`` (N's queue). The only reader of a stated bound in tests/fidelity/: it can fail a cell, never pass
    one, and returns nothing (tests/test_fidelity_bars.py holds it to that)."""
    bound = client["ttft_lag_bound_ms"] + LOOPBACK_MS
    assert all(send <= bound + per_send_ms and read <= bound for send, read in late), ("stamps later than the cell's bound", bound, late)


def median_range(ranges: list[tuple[float, float]]) -> tuple[float, float]:
    """The median of each end of ``ranges`` — the median of values known to lie in them lies in this range."""
    return statistics.median(lo for lo, _ in ranges), statistics.median(hi for _, hi in ranges)
