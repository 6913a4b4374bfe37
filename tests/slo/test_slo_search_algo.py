"""The search's order of probes (core/slo/search.py) against an oracle with a known threshold: double,
halve, bisect, the resolution, the maximum — no engine, no clock (docs/load.md, "Search")."""

from __future__ import annotations

import pytest

from infermatrix.core.config import ConfigError
from infermatrix.core.slo.search import HALVINGS, MAX_PROBES, Bisection, Resolution, parse_resolution


def search(threshold: float, start: float, over: str = "rate", resolution: str | None = None, max_load: float | None = None) -> Bisection:
    """Run the search against an SLO that holds exactly up to ``threshold``."""
    b = Bisection(start=start, resolution=parse_resolution(resolution, over), over=over, max_load=max_load)
    while (nxt := b.next_step()) is not None:
        load, step = nxt
        b.record(load, load <= threshold, step)
    return b


@pytest.mark.parametrize("threshold", [0.7, 1.0, 3.3, 10.0, 47.5, 1000.0])
def test_rate_search_brackets_the_threshold_within_its_resolution(threshold):
    b = search(threshold, start=2.0)
    assert b.outcome == "found"
    assert b.lo <= threshold < b.hi
    assert (b.hi - b.lo) <= 0.10 * b.lo * (1 + 1e-9)  # the default resolution: 10 % of the highest pass
    loads = [p[0] for p in b.probes]
    assert len(loads) == len(set(loads))  # no load probed twice


def test_concurrency_doubles_then_bisects_to_one_request():
    b = search(9, start=1, over="concurrency")
    assert [(int(x), s) for x, _, s in b.probes] == [(1, "start"), (2, "double"), (4, "double"), (8, "double"), (16, "double"),
                                                     (12, "bisect"), (10, "bisect"), (9, "bisect")]  # fmt: skip
    assert (b.lo, b.hi, b.outcome) == (9, 10, "found")


def test_a_failing_start_is_halved_until_one_passes():
    b = search(7.0, start=100.0)
    assert [s for _, _, s in b.probes][:5] == ["start", "halve", "halve", "halve", "halve"]
    assert b.lo <= 7.0 < b.hi and b.outcome == "found"


def test_no_load_meets_the_slo():
    b = search(0.0001, start=8.0)
    assert b.outcome == "none_passed" and b.lo is None
    assert len(b.probes) == HALVINGS + 1 and b.hi == pytest.approx(8.0 / 2**HALVINGS)


def test_the_stated_maximum_ends_the_doubling():
    b = search(1000.0, start=1.0, max_load=50.0)
    assert [x for x, _, _ in b.probes] == [1, 2, 4, 8, 16, 32, 50]
    assert (b.lo, b.hi, b.outcome) == (50, None, "max_reached")


def test_absolute_resolution_and_the_probe_cap():
    b = search(3.3, start=1.0, resolution="0.25")
    assert b.outcome == "found" and b.hi - b.lo <= 0.25 and b.lo <= 3.3 < b.hi
    tiny = search(3.3, start=1.0, resolution="0.0000000001")
    assert tiny.outcome in ("found", "too_many_probes") and len(tiny.probes) <= MAX_PROBES


def test_parse_resolution():
    assert parse_resolution(None, "rate") == Resolution(0.10, True)
    assert parse_resolution(None, "concurrency") == Resolution(1.0, False)
    assert parse_resolution("5%", "rate").text() == "5%" and parse_resolution("0.5", "rate").text() == "0.5"
    for bad, over in (("abc", "rate"), ("0", "rate"), ("-1%", "rate"), ("0.5", "concurrency")):
        with pytest.raises(ConfigError, match="--resolution"):
            parse_resolution(bad, over)


def test_a_rate_probe_counts_at_the_rate_it_delivered():
    """Issue 27 item 7, the trial's probes: asked 8/s, delivered 9/s and passed; asked 16/s, delivered 13/s and failed.
    The bounds are what the engine saw, [9, 13], and the next probe is asked between them."""
    b = Bisection(start=8.0, resolution=parse_resolution(None, "rate"), over="rate")
    assert b.next_step() == (8.0, "start")
    b.record(8.0, True, "start", delivered=9.0)
    assert b.next_step() == (18.0, "double")  # doubling from what was delivered
    b.record(18.0, False, "double", delivered=13.0)
    assert (b.lo, b.hi) == (9.0, 13.0) and b.probes == [(9.0, True, "start"), (13.0, False, "double")]
    assert b.next_step() == (11.0, "bisect")


def delivered_search(threshold: float, start: float, duration_s: float, resolution: str | None = None,
                     max_load: float | None = None) -> Bisection:
    """Constant arrivals over ``duration_s``: a probe asked at R sends floor(R x T) requests, i.e. delivers floor(R·T)/T."""
    b = Bisection(start=start, resolution=parse_resolution(resolution, "rate"), over="rate", max_load=max_load)
    while (nxt := b.next_step()) is not None:
        load, step = nxt
        got = int(load * duration_s + 1e-9) / duration_s
        b.record(load, got <= threshold, step, delivered=got)
    return b


def test_a_probe_that_cannot_narrow_the_interval_ends_the_search_saying_why():
    """At 2 s probes the delivered rates are multiples of 0.5/s: an absolute resolution of 0.1 cannot be reached, and
    the search ends on the first probe that delivers a bound it already has, instead of asking it again until 40 probes."""
    b = delivered_search(3.3, start=1.0, duration_s=2.0, resolution="0.1")
    assert b.outcome == "found" and (b.lo, b.hi) == (3.0, 3.5), b.probes
    assert len(b.probes) < 10 and "narrows nothing" in (b.note or "")
    assert all(x * 2 == int(x * 2) for x, _, _ in b.probes)  # every bound a delivered rate


def test_a_stated_maximum_that_passes_below_itself_still_ends_the_doubling():
    b = delivered_search(1000.0, start=1.0, duration_s=3.0, max_load=49.9)  # asked 49.9/s, delivered 149 / 3 s = 49.67/s
    assert b.outcome == "max_reached" and b.probes[-1] == (pytest.approx(149 / 3), True, "max") and len(b.probes) == 7


def test_crossed_verdicts_end_the_search_with_the_reason():
    b = Bisection(start=4.0, resolution=parse_resolution("1%", "rate"), over="rate")
    b.record(4.0, True, "start", delivered=4.0)
    b.record(8.0, False, "double", delivered=8.0)
    b.record(6.0, True, "bisect", delivered=6.2)
    b.record(7.0, False, "bisect", delivered=6.1)  # a fail below a pass: noise around the boundary
    assert b.next_step() is None and b.outcome == "found" and "cross" in (b.note or "")
