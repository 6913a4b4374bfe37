"""The tuner's search, as a pure state machine (docs/tuning.md, "The tuner").

The driver (core/run/tune.py) asks :meth:`Tuner.next_probe` what to run next, given every result so far, runs it
(one run of the sweep, one engine launch) and adds its result; this module never measures, so the order of probes
is tested without an engine (tests/tune/test_tune_search.py). Because the next probe is a function of the results
alone, a tune stopped half-way continues from its stored results (``infermatrix resume SWEEP_ID``).

The method, in three phases:

1. **A log-spaced grid** over each ``--over`` range (both ends included; the Cartesian product of the axes), as many
   points per axis as fit two thirds of the budget once halving is counted;
2. **successive halving**: every grid point is probed with a short window; the better half (ranked by the objective,
   ties to the smaller setting; where every kept one is within noise of the best, those within noise of them go on
   too: the rung told nothing apart at the cut) is probed again with a window twice as long, and so on up to the
   config's own window (``matrix.duration_s``): rung ``r`` of ``R`` has ``2^(r-R+1)`` of it;
3. **refinement** at the full window, one axis after another: the gap between the best setting and its nearest
   probed neighbour on each side is bisected (geometric middle) until each gap is within the resolution
   (``hi <= (1 + resolution) x lo``), an integer axis has no value left between, or the budget is spent. The side
   above is left alone when its neighbour is within noise of the best: a plateau, where the smaller setting is
   preferred anyway.

The best setting is the *smallest* one within noise of the highest value measured with the full window (noise:
:func:`tied`), so on an objective that saturates (capacity above the batch cap that the load needs) the answer is
the plateau's edge, not a point picked by noise along it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import product

from infermatrix.core.intervals.batches import Interval
from infermatrix.core.intervals.ratio import verdict_of
from infermatrix.core.slo.search import Resolution
from infermatrix.core.tune.space import Axis, log_points, midpoint

__all__ = ["ETA", "OBJECTIVES", "Probe", "Result", "Answer", "Tuner", "tied", "sh_cost"]

ETA = 2  # successive halving keeps 1/ETA of the candidates per rung, and the next rung's window is ETA times longer
OBJECTIVES = ("goodput", "capacity")
GRID_SHARE = 2 / 3  # of the budget, at most, for the grid and its halving; the rest refines
MAX_POINTS_PER_AXIS = 9

Point = tuple[float, ...]


@dataclass(frozen=True)
class Probe:
    """One run to make: the setting (a value per axis) and its rung (the window is ``ETA^(rung - last)`` of the full)."""

    point: Point
    rung: int


@dataclass(frozen=True)
class Result:
    """A probe's objective value, with its 95 % interval where the objective has one (goodput); value None: the
    probe failed (the engine refused the setting, or the run stopped without a cell)."""

    point: Point
    rung: int
    value: float | None
    lo: float | None = None
    hi: float | None = None


@dataclass
class Answer:
    """What the tune found: the best full-window result and its runner-up, the margin and whether it is beyond the
    noise, each axis's bracket around the best (the nearest probed settings below and above), why it stopped."""

    best: Result | None
    runner_up: Result | None
    margin: float | None
    beyond_noise: bool | None
    bracket: list[tuple[float | None, float | None]]
    probes: int
    reason: str


def tied(a: Result, b: Result, objective: str) -> bool:
    """Whether two results are within noise of each other. Capacity: the load grid is the resolution (equal is a
    tie). Goodput: `compare`'s rule on their intervals (core/intervals verdict_of), the fixed 2 % rule without."""
    if a.value is None or b.value is None:
        return a.value is None and b.value is None
    if objective == "capacity" or a.value <= 0 or b.value <= 0:
        return a.value == b.value

    def iv(r: Result) -> Interval | float:
        assert r.value is not None
        return Interval(r.value, r.lo, r.hi, "", 0) if r.lo is not None and r.hi is not None else r.value

    return verdict_of(iv(a), iv(b), True).verdict == "same"


def sh_cost(n: int) -> int:
    """Probes successive halving spends on ``n`` candidates: n + ⌈n/2⌉ + … + 1."""
    total = n
    while n > 1:
        n = math.ceil(n / ETA)
        total += n
    return total


def _rungs(n: int) -> int:
    rungs = 1
    while n > 1:
        n, rungs = math.ceil(n / ETA), rungs + 1
    return rungs


def _grid(axes: list[Axis], budget: int) -> tuple[list[Point], int]:
    """The starting grid and the number of rungs the budget allows (see the module's docstring)."""
    corners = [tuple(p) for p in product(*[log_points(a, 2) for a in axes])]
    if budget < len(corners):  # too few runs for both ends of each axis: the middle, at the full window
        return [tuple(log_points(a, 1)[0] for a in axes)], 1
    if budget < sh_cost(len(corners)):  # no halving: the corners, at the full window
        return corners, 1
    chosen = corners
    for p in range(3, MAX_POINTS_PER_AXIS + 1):
        grid = [tuple(x) for x in product(*[log_points(a, p) for a in axes])]
        if sh_cost(len(grid)) > max(budget * GRID_SHARE, sh_cost(len(corners))):
            break
        chosen = grid
    return sorted(chosen), _rungs(len(chosen))


def _rank_key(r: Result | None, point: Point) -> tuple[float, Point]:
    return (-(r.value if r is not None and r.value is not None else -math.inf), point)


@dataclass
class Tuner:
    """The search over ``axes`` for ``objective`` within ``budget`` runs, to ``resolution``."""

    axes: list[Axis]
    objective: str
    budget: int
    resolution: Resolution
    grid: list[Point] = field(init=False)
    rungs: int = field(init=False)

    def __post_init__(self) -> None:
        self.grid, self.rungs = _grid(self.axes, self.budget)

    def window_share(self, rung: int) -> float:
        """The share of the config's window a probe of this rung measures for."""
        return float(ETA ** (rung - (self.rungs - 1)))

    def next_probe(self, results: list[Result]) -> Probe | None:
        """What to run next; None when the search is over (``answer`` says why)."""
        if len(results) >= self.budget:
            return None
        done = {(r.point, r.rung): r for r in results}
        return self._halving(done) or self._refinement(done)

    def _halving(self, done: dict[tuple[Point, int], Result]) -> Probe | None:
        survivors = list(self.grid)
        for rung in range(self.rungs):
            missing = next((p for p in survivors if (p, rung) not in done), None)
            if missing is not None:
                return Probe(missing, rung)
            ranked = sorted(survivors, key=lambda p: _rank_key(done.get((p, rung)), p))
            keep = math.ceil(len(survivors) / ETA)
            top, cut = done[(ranked[0], rung)], done[(ranked[keep - 1], rung)]
            # a rung whose kept half is all within noise of its best told nothing apart at the cut (a window too short
            # to measure, every cell invalid): the settings tied with the cut go on too
            undecided = cut.value is not None and tied(cut, top, self.objective)
            survivors = ranked[:keep] + [p for p in ranked[keep:] if undecided and tied(done[(p, rung)], cut, self.objective)]
        return None

    def best(self, results: list[Result]) -> Result | None:
        """The smallest setting within noise of the highest value measured with the full window."""
        final = [r for r in results if r.rung == self.rungs - 1 and r.value is not None]
        if not final:
            return None
        top = min(final, key=lambda r: _rank_key(r, r.point))
        return min((r for r in final if r is top or tied(r, top, self.objective)), key=lambda r: r.point)

    def _neighbours(self, results: list[Result], best: Point, i: int) -> tuple[float | None, float | None]:
        """The nearest values of axis ``i`` probed (with any values of the other axes) below and above the best's:
        the gaps a coordinate search narrows."""
        along = {r.point[i] for r in results}
        below = [x for x in along if x < best[i]]
        above = [x for x in along if x > best[i]]
        return (max(below) if below else None), (min(above) if above else None)

    def _tied_somewhere(self, results: list[Result], a: Point, b: Point) -> bool:
        """Whether ``a`` and ``b`` were measured with one window and found within noise (the longest such window)."""
        common = sorted({r.rung for r in results if r.point == a} & {r.rung for r in results if r.point == b})
        if not common:
            return False
        ra = next(r for r in results if r.point == a and r.rung == common[-1])
        rb = next(r for r in results if r.point == b and r.rung == common[-1])
        return tied(ra, rb, self.objective)

    def _refinement(self, done: dict[tuple[Point, int], Result]) -> Probe | None:
        results = list(done.values())
        best = self.best(results)
        if best is None:
            return None
        for i, axis in enumerate(self.axes):
            below, above = self._neighbours(results, best.point, i)
            x = best.point[i]
            if below is not None and not self.resolution.met(below, x):
                m = midpoint(axis, below, x)
                if m is not None:
                    return Probe(best.point[:i] + (m,) + best.point[i + 1 :], self.rungs - 1)
            if above is not None and not self.resolution.met(x, above):
                upper = best.point[:i] + (above,) + best.point[i + 1 :]
                m = midpoint(axis, x, above)
                if m is not None and not self._tied_somewhere(results, best.point, upper):
                    return Probe(best.point[:i] + (m,) + best.point[i + 1 :], self.rungs - 1)
        return None

    def answer(self, results: list[Result]) -> Answer:
        """The best setting, its runner-up and margin, the bracket per axis, and why the search stopped."""
        best = self.best(results)
        if best is None:
            reason = "no probe measured with the full window" if results else "no probe run"
            return Answer(None, None, None, None, [(None, None)] * len(self.axes), len(results), reason)
        others = [r for r in results if r.rung == self.rungs - 1 and r.value is not None and r.point != best.point]
        ru = min(others, key=lambda r: _rank_key(r, r.point)) if others else None
        margin = beyond = None
        if ru is not None and ru.value is not None and best.value is not None:
            margin = best.value / ru.value - 1 if ru.value > 0 else None
            beyond = not tied(best, ru, self.objective) and best.value > ru.value
        bracket = [self._neighbours(results, best.point, i) for i in range(len(self.axes))]
        done = {(r.point, r.rung): r for r in results}
        if (self._halving(done) or self._refinement(done)) is None:
            reason = f"resolution reached ({self.resolution.text()})"
        elif len(results) >= self.budget:
            reason = f"budget spent ({self.budget} runs)"
        else:
            reason = "stopped before the search ended"
        return Answer(best, ru, margin, beyond, bracket, len(results), reason)
