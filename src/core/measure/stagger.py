"""Staggered phases: each stream's first request is shortened so the N streams do not finish in lockstep.

Why: all N streams start together (right after the warm-up) with the same ``max_tokens`` (and ``ignore_eos``),
so without this they all finish together and all restart together, and the engine's batch collapses at every
generation boundary inside a window — a restart storm of N prefills, then N streams ramping back in. Stream
``i``'s first request asks for ``min + (max_output − min) × (i + 1) / N`` tokens (``min`` =
:data:`STAGGER_MIN_TOKENS`); every later request of the stream asks for ``max_output``. The streams' ends are then
spread evenly over one generation length, and since every restart is a whole generation they stay spread:
restarts never bunch, and the engine holds N (docs/metrics.md, "Staggered phases").

A shortened first request is a real request: its tokens count, it is checked for loops and reconciled like
any other. Only the ``e2e`` histogram (sent → finished) leaves it out, since its length is not the workload's.
"""

from __future__ import annotations

import math

__all__ = ["STAGGER_MIN_TOKENS", "first_max_tokens"]

# The shortest first request: a few steps of decoding, so even stream 0's first request is more than its first
# token (and its end is not a second burst of restarts right behind the ramp).
STAGGER_MIN_TOKENS = 16


def first_max_tokens(stream: int, n: int, max_output: int, stagger: bool = True) -> int:
    """``max_tokens`` of stream ``stream``'s first request in a cell of ``n`` streams: evenly spaced from just above
    :data:`STAGGER_MIN_TOKENS` (stream 0) to ``max_output`` (stream ``n − 1``). Spaced over ``max_output − min``
    rather than clamped at the minimum, so no two streams share a length where the spacing is a token or more (a
    clamp would end the first streams together, and they would restart together for the rest of the cell)."""
    if not stagger or n <= 1 or max_output <= STAGGER_MIN_TOKENS:
        return max_output
    return STAGGER_MIN_TOKENS + math.ceil((max_output - STAGGER_MIN_TOKENS) * (stream + 1) / n)
