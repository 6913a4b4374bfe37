"""Whose was a ramp that did not finish? (definition: docs/metrics.md, "Client verdict", ramp).

A cell's ramp ends when every stream has read its first token. When ``matrix.ramp_timeout_s`` passes first, either
the engine had not produced those tokens (a slow prefill, a full queue: the cell is ``error``), or it had and the
client had not read them — a reader too slow for N streams falls behind from the first chunks on, and the last
streams' first tokens sit in socket buffers behind everything the early streams were sent (issue 17: httpx at 256
streams on two cores). Only the engine can tell the two apart: its generated-tokens counter, read once before the
streams start and once when the ramp gives up, against the tokens the client had read by that read's stamp. Tokens
the engine generated and the client never read beyond :data:`BEHIND_SHARE` of the engine's count (plus what is
honestly in flight: one chunk a stream and the read's own duration at the engine's rate) mean the client, not the
engine, set the pace: ``client_bound`` with that reason. Without such a counter the verdict stays ``error``; with one
the engine did not answer at the ramp's end, the reason says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infermatrix.core.engine.traits import Gauges
from infermatrix.core.measure.selfcheck import BEHIND_SHARE
from infermatrix.core.measure.steady import GaugeSample
from infermatrix.core.types import RequestRecord

__all__ = ["RampCheck", "ramp_check", "ramp_verdict", "streams_started_by"]


@dataclass(frozen=True)
class RampCheck:
    engine_tokens: float  # generated between the read before the streams and the read at the ramp's end
    client_tokens: int  # read by the client up to that second read's stamp
    allowance: float  # what may honestly be unread: BEHIND_SHARE of the engine's count plus chunks in flight
    seconds: float

    @property
    def unread(self) -> float:
        return self.engine_tokens - self.client_tokens

    @property
    def behind(self) -> bool:
        return self.unread > self.allowance

    def reason(self) -> str:
        share = 100 * self.unread / self.engine_tokens if self.engine_tokens > 0 else 0.0
        return (f"the client fell behind: the engine generated {self.engine_tokens:,.0f} tokens in the ramp's "
                f"{self.seconds:.0f} s and the client had read {self.client_tokens:,} ({share:.0f} % unread)")

    def as_dict(self) -> dict[str, Any]:
        return {"engine_tokens": self.engine_tokens, "client_tokens": self.client_tokens, "allowance": round(self.allowance, 1),
                "seconds": round(self.seconds, 3), "behind": self.behind}  # fmt: skip


def ramp_check(n: int, records: list[RequestRecord], before: Gauges | None, at_end: GaugeSample | None, started: float) -> RampCheck | None:
    """The engine's count against the client's over a ramp that gave up (pure). ``before`` was read just before
    the streams started (at ``started``, monotonic), ``at_end`` when the ramp gave up; None when either read or the
    counter is missing (an engine without one, or one that counts at request end only: ``parse_gauges`` blanks it)."""
    if before is None or at_end is None:
        return None
    a, b = before.generated_tokens, at_end.gauges.generated_tokens
    if a is None or b is None:
        return None
    eng = float(b) - float(a)
    cli = sum(k for r in records for t, k in r.events if t <= at_end.t)
    chunk = max((k for r in records for _, k in r.events), default=1)
    seconds = max(at_end.t - started, 0.0)
    rate = eng / seconds if seconds > 0 else 0.0
    return RampCheck(eng, cli, BEHIND_SHARE * eng + n * chunk + at_end.took_s * rate, seconds)


UNANSWERED = "whose it was is unknown: the engine did not answer its reads at the ramp's end"


def ramp_verdict(status: str, reason: str | None, check: RampCheck | None, unanswered: bool) -> tuple[str, str | None]:
    """A ramp's ``error`` judged (pure): the client's when the engine generated what it never read; said to be
    unknown when the engine has the counter and did not answer (``unanswered``) — rather than left to read as the
    engine's. Any other status stands."""
    if status != "error":
        return status, reason
    if check is not None and check.behind:
        return "client_bound", f"{reason}; {check.reason()}"
    if check is None and unanswered:
        return status, f"{reason}; {UNANSWERED}"
    return status, reason


def streams_started_by(records: list[RequestRecord], n: int, by: float | None) -> int:
    """How many of the ``n`` streams had read a first token by ``by`` (monotonic; None: by now). Counted at the
    ramp's timeout, since the engine's reads after it can outlast a late stream's start."""
    limit = by if by is not None else float("inf")
    return sum(1 for i in range(n) if any(r.first_token is not None and r.first_token <= limit for r in records if r.stream_index == i))
