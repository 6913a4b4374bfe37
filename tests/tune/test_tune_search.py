"""The tuner's search (core/tune) against oracles with a known optimum: the grid, successive halving, the
refinement to the resolution, the budget, the noise rule — no engine, no clock (docs/tuning.md, "The tuner")."""

from __future__ import annotations

import math

import pytest

from infermatrix.core.config import ConfigError
from infermatrix.core.slo.search import parse_resolution
from infermatrix.core.tune import Axis, Result, Tuner, log_points, midpoint, parse_over, tied
from infermatrix.core.tune.search import sh_cost

RES = parse_resolution("25%", "rate")


def drive(tuner: Tuner, value, interval: float | None = None) -> list[Result]:
    """Run the search against ``value(point)`` (None: the probe fails); with ``interval``, each result carries
    value × (1 ∓ interval) as its 95 % interval."""
    results: list[Result] = []
    while (probe := tuner.next_probe(results)) is not None:
        v = value(probe.point)
        lo, hi = (None, None) if v is None or interval is None else (v * (1 - interval), v * (1 + interval))
        results.append(Result(probe.point, probe.rung, v, lo, hi))
    return results


def plateau(loads: tuple[int, ...]):
    """Capacity under a batch cap m: the largest load of the grid that fits it (the sim's admission: more wait)."""
    return lambda p: float(max((c for c in loads if c <= p[0]), default=0))


@pytest.mark.parametrize("lo, hi, loads, budget", [
    (1, 64, (1, 3, 6), 12), (8, 512, (16, 48, 100), 16), (1, 16, (2, 6), 8), (2, 1000, (300,), 16), (1, 64, (64,), 12),
])  # fmt: skip
def test_on_a_plateau_the_answer_is_its_edge_within_the_resolution(lo, hi, loads, budget):
    """The edge is the smallest setting with the most capacity (max(loads)); the answer is at or above it, within
    25 %, and the probed setting below it is below the edge (so it is bracketed); on an integer axis whose gap runs
    out of integers first, exactly the edge."""
    edge = max(loads)
    tuner = Tuner([parse_over(f"k={lo}..{hi}")], "capacity", budget, RES)
    results = drive(tuner, plateau(loads))
    answer = tuner.answer(results)
    assert answer.best is not None and edge <= answer.best.point[0] <= 1.25 * edge, (answer, results)
    assert answer.reason.startswith("resolution reached"), answer
    assert len(results) <= budget and len({(r.point, r.rung) for r in results}) == len(results)  # nothing probed twice
    below, _ = answer.bracket[0]
    assert (below is None and edge == lo) or below < edge <= answer.best.point[0] <= 1.25 * below
    if edge < 10:
        assert answer.best.point == (edge,)


@pytest.mark.parametrize("opt", [11.0, 37.0, 150.0, 420.0])
def test_an_interior_peak_is_found_within_the_resolution_and_the_noise(opt):
    """A unimodal goodput on the log scale, values exact, judged by the fixed 2 % rule: the answer lies within the
    resolution (25 %) and the 2 % noise band (|ln x − ln opt| < 0.142) of the peak."""
    def value(p):
        return 1000 * math.exp(-((math.log(p[0]) - math.log(opt)) ** 2))

    tuner = Tuner([parse_over("k=8.0..512.0")], "goodput", 16, RES)
    results = drive(tuner, value)
    answer = tuner.answer(results)
    best = answer.best
    assert best is not None and abs(math.log(best.point[0] / opt)) <= math.log(1.25) + 0.142 + 1e-9, (best, results)
    assert answer.reason == "resolution reached (25%)", answer  # it stops there, not at the budget
    below, above = answer.bracket[0]
    assert below is None or best.point[0] <= 1.25 * below, answer
    # the gap above is narrowed too, unless the setting above is within noise of the best (then the smaller is preferred)
    assert above is None or above <= 1.25 * best.point[0] or abs(value((above,)) / best.value - 1) <= 0.02, answer


def test_halving_probes_every_grid_point_short_then_the_better_half_longer():
    tuner = Tuner([parse_over("k=1..64")], "capacity", 12, RES)
    assert tuner.grid == [(1,), (4,), (16,), (64,)] and tuner.rungs == 3
    assert [tuner.window_share(r) for r in range(3)] == [0.25, 0.5, 1.0]
    results = drive(tuner, plateau((1, 3, 6)))
    rung0 = [r.point for r in results if r.rung == 0]
    rung1 = [r.point for r in results if r.rung == 1]
    rung2 = [r.point for r in results if r.rung == 2]
    assert rung0 == [(1,), (4,), (16,), (64,)] and results[:4] == [r for r in results if r.rung == 0]
    assert rung1 == [(16,), (64,)]  # the better half; of 16 and 64, tied, both go on
    # the survivor, ties to the smaller setting — and 64, tied with it: a rung that told them apart at the cut
    # would have dropped it — then refinement at the full window
    assert rung2[:2] == [(16,), (64,)]
    assert rung2[2:] == [(8,), (6,), (5,)]  # geometric middles between the best and its lower neighbour


def test_the_search_is_a_function_of_its_results_so_a_resumed_tune_goes_on_the_same_way():
    def value(p):
        return 1000 * math.exp(-((math.log(p[0]) - math.log(70)) ** 2))

    whole = drive(Tuner([parse_over("k=8..512")], "goodput", 16, RES), value)
    half = whole[:7]
    fresh = Tuner([parse_over("k=8..512")], "goodput", 16, RES)  # a new process: only the stored results
    rest: list[Result] = list(half)
    while (probe := fresh.next_probe(rest)) is not None:
        rest.append(Result(probe.point, probe.rung, value(probe.point)))
    assert rest == whole


@pytest.mark.parametrize("budget", [1, 2, 3, 5, 9, 16])
def test_never_more_runs_than_the_budget_and_small_budgets_still_answer(budget):
    tuner = Tuner([parse_over("k=1..64")], "capacity", budget, RES)
    results = drive(tuner, plateau((1, 3, 6)))
    assert len(results) <= budget
    answer = tuner.answer(results)
    assert answer.best is not None and answer.probes == len(results)
    if budget == 1:
        assert [(r.point, r.rung) for r in results] == [((8,), 0)]  # the geometric middle, at the full window
    if budget == 2:
        assert [r.point for r in results] == [(1,), (64,)] and tuner.rungs == 1
    if budget == 5:
        assert answer.reason == "budget spent (5 runs)", answer


def test_a_failed_probe_is_never_the_best_and_the_search_goes_on():
    """The engine refuses a setting below 4 (vLLM: KV cache too small): those probes fail, the answer is above."""
    tuner = Tuner([parse_over("k=1..64")], "capacity", 12, RES)
    results = drive(tuner, lambda p: None if p[0] < 4 else plateau((1, 3, 6))(p))
    assert any(r.value is None for r in results)
    assert tuner.answer(results).best.point == (6,)


def test_two_axes_each_refined_to_its_edge():
    tuner = Tuner([parse_over("a=1..64"), parse_over("b=1..64")], "capacity", 40, RES)
    results = drive(tuner, lambda p: float(min(max((c for c in (2, 6) if c <= p[0]), default=0), 10 if p[1] >= 20 else 1)))
    assert tuner.answer(results).best.point == (6, 20), results
    assert len(results) <= 40


def test_the_noise_rule():
    assert tied(Result((1,), 0, 6.0), Result((2,), 0, 6.0), "capacity")
    assert not tied(Result((1,), 0, 6.0), Result((2,), 0, 3.0), "capacity")
    assert tied(Result((1,), 0, 100.0), Result((2,), 0, 101.5), "goodput")  # no intervals: the fixed 2 % rule
    assert not tied(Result((1,), 0, 100.0), Result((2,), 0, 103.0), "goodput")
    assert tied(Result((1,), 0, 100.0, 90.0, 110.0), Result((2,), 0, 105.0, 95.0, 115.0), "goodput")  # wide intervals
    assert not tied(Result((1,), 0, 100.0, 99.0, 101.0), Result((2,), 0, 105.0, 104.0, 106.0), "goodput")
    assert not tied(Result((1,), 0, None), Result((2,), 0, 0.0), "capacity")


def test_grid_points_and_middles():
    assert log_points(Axis("k", 8, 512, True), 4) == [8, 32, 128, 512]
    assert log_points(Axis("k", 1, 3, True), 9) == [1, 2, 3]  # an integer axis never repeats a value
    assert midpoint(Axis("k", 1, 64, True), 4, 16) == 8 and midpoint(Axis("k", 1, 64, True), 5, 6) is None
    assert midpoint(Axis("k", 1, 64, True), 4, 6) == 5
    assert sh_cost(4) == 7 and sh_cost(5) == 11 and sh_cost(1) == 1


@pytest.mark.parametrize("text, message", [
    ("engine.args.max_num_seqs", "expected KEY=LO..HI"),
    ("engine.args.max_num_seqs=8", "expected KEY=LO..HI"),
    ("engine.args.max_num_seqs=512..8", "an empty or reversed range"),
    ("engine.args.max_num_seqs=8..8", "an empty or reversed range"),
    ("engine.args.max_num_seqs=a..b", "is not a number"),
    ("engine.args.max_num_seqs=..8", "is not a number"),
    ("engine.args.max_num_seqs=0..8", "must lie above 0"),
    ("=1..2", "expected KEY=LO..HI"),
])  # fmt: skip
def test_bad_ranges(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_over(text)


def test_refinement_stops_at_the_resolution_not_later():
    """The best at the range's low end (goodput falling with the setting): the gap above is bisected until it is
    within 25 %, and no further — the last bisection left it wider than √1.25 (halving the log-gap from over 1.25)."""
    tuner = Tuner([parse_over("k=8.0..512.0")], "goodput", 16, RES)
    results = drive(tuner, lambda p: 8000 / p[0])
    answer = tuner.answer(results)
    assert answer.best.point == (8.0,) and answer.reason == "resolution reached (25%)", answer
    _, above = answer.bracket[0]
    assert math.sqrt(1.25) < above / 8.0 <= 1.25, answer


def test_a_tie_at_the_cut_is_no_decision():
    """A window too short to measure anything (every short probe 0, as when each cell is judged invalid): halving
    does not drop settings on a tie; the longer window decides, and the answer is the plateau's edge still."""
    tuner = Tuner([parse_over("k=1..64")], "capacity", 16, RES)
    results: list[Result] = []
    while (probe := tuner.next_probe(results)) is not None:
        v = 0.0 if probe.rung == 0 else plateau((1, 3, 6))(probe.point)
        results.append(Result(probe.point, probe.rung, v))
    assert [r.point for r in results if r.rung == 1] == [(1,), (4,), (16,), (64,)]  # all four go on
    assert [r.point for r in results if r.rung == 2][:2] == [(16,), (64,)]
    assert tuner.answer(results).best.point == (6,)
