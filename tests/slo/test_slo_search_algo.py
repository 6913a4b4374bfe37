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
