"""The arrival process a config names (``poisson``, ``constant``, ``gamma:K``): parsed here, below
``config.py``, so the config checks it without importing the load package that draws the schedules
(``core/load/arrivals.py``; docs/load.md). Pure: no I/O, no imports from infermatrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["Arrival", "ArrivalKind", "parse_arrival"]

ArrivalKind = Literal["poisson", "gamma", "constant"]


@dataclass(frozen=True)
class Arrival:
    kind: ArrivalKind
    shape: float = 1.0  # gamma's K; 1 for poisson (gamma(1) is exponential)

    def __str__(self) -> str:
        return f"gamma:{self.shape:g}" if self.kind == "gamma" else self.kind


def parse_arrival(text: str) -> Arrival:
    """``poisson``, ``constant`` or ``gamma:K`` (K > 0); a ValueError saying what is accepted otherwise."""
    word = text.strip().lower()
    if word == "poisson":
        return Arrival("poisson")
    if word == "constant":
        return Arrival("constant")
    if word.startswith("gamma:"):
        try:
            k = float(word.split(":", 1)[1])
        except ValueError:
            k = float("nan")
        if math.isfinite(k) and k > 0:
            return Arrival("gamma", k)
    raise ValueError(f"arrival {text!r}: expected poisson, constant or gamma:K with K > 0 (e.g. gamma:0.5)")
