"""What a tune searches over: ``--over KEY=LO..HI`` ranges of numeric settings, and the points on them.

Pure: no file, no engine. A range is searched on a log scale (a batch cap of 8 against 16 matters as much as
256 against 512); an axis whose ends are integers holds integers only (its points are rounded, never repeated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infermatrix.core.config import ConfigError, parse_value

__all__ = ["Axis", "parse_over", "log_points", "midpoint"]


@dataclass(frozen=True)
class Axis:
    """One searched setting: its key (any key ``--set`` takes) and its range, ``lo`` < ``hi``, both > 0."""

    key: str
    lo: float
    hi: float
    integer: bool

    def value(self, x: float) -> float | int:
        """``x`` as the setting takes it: an integer on an integer axis."""
        return int(round(x)) if self.integer else float(x)

    def text(self) -> str:
        return f"{self.key}={_num(self.lo)}..{_num(self.hi)}"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _bound(raw: str, label: str) -> int | float:
    value = parse_value(raw.strip()) if raw.strip() else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{label}: {raw.strip() or 'an empty bound'!s} is not a number (give KEY=LO..HI, e.g. engine.args.max_num_seqs=8..512)")
    return value


def parse_over(text: str) -> Axis:
    """``engine.args.max_num_seqs=8..512`` -> ``Axis("engine.args.max_num_seqs", 8, 512, integer=True)``."""
    label = f"--over {text!r}"
    key, sep, raw = text.partition("=")
    lo_raw, dots, hi_raw = raw.partition("..")
    if not sep or not key.strip() or not dots:
        raise ConfigError(f"{label}: expected KEY=LO..HI, e.g. engine.args.max_num_seqs=8..512")
    lo, hi = _bound(lo_raw, label), _bound(hi_raw, label)
    if not lo > 0:
        raise ConfigError(f"{label}: the range must lie above 0 (it is searched on a log scale)")
    if not hi > lo:
        raise ConfigError(f"{label}: an empty or reversed range ({_num(lo)}..{_num(hi)}): give LO < HI")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ConfigError(f"{label}: the range must be finite")
    return Axis(key.strip(), float(lo), float(hi), isinstance(lo, int) and isinstance(hi, int))


def log_points(axis: Axis, n: int) -> list[float]:
    """``n`` points spread evenly on a log scale from ``lo`` to ``hi`` (both ends included); on an integer axis
    rounded and without repeats (so fewer where the range holds fewer integers)."""
    if n <= 1:
        return [axis.value(math.sqrt(axis.lo * axis.hi))]
    ratio = axis.hi / axis.lo
    raw = [axis.lo * ratio ** (i / (n - 1)) for i in range(n)]
    return sorted({axis.value(x) for x in raw})


def midpoint(axis: Axis, a: float, b: float) -> float | None:
    """The geometric middle of ``a`` < ``b`` as the axis takes it; None when no new value lies strictly between
    (an integer axis: ``a`` and ``b`` neighbours)."""
    m = axis.value(math.sqrt(a * b))
    if axis.integer and not a < m < b:  # rounding fell on an end: the nearest integer inside, if any
        inside = [v for v in (int(math.floor(math.sqrt(a * b))), int(math.ceil(math.sqrt(a * b)))) if a < v < b]
        return inside[0] if inside else None
    return m if a < m < b else None
