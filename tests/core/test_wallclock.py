"""Per-phase wall-time accounting (core/wallclock.py): an injected clock, no sleeps."""

from __future__ import annotations

import pytest

from infermatrix.core.engine.step import Phase
from infermatrix.core.wallclock import GROUPS, PhaseClock, add_totals, group_of, wall_split


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def test_every_named_phase_has_a_group():
    named = ["start-up", "launch", "ready", "describe", "capacity", "tokenizer", "gauges", "recover", "stop", "prompts",
             "prefill (throwaway)", "prefill 1/3", "warm-up", "warm-up 3/8", "metrics", "ramp", "steady", "measure",
             "drain", "verdict", "save", "health", "round trip"]  # fmt: skip
    assert {group_of(p) for p in named} <= set(GROUPS) - {"other"}
    assert group_of("prefill (throwaway)") == "warm-up"  # its TTFT is not kept: not measurement
    assert group_of("prefill 2/3") == "prefill"
    assert group_of("something new") == "other"


def test_clock_attributes_all_time_to_the_phase_that_was_current():
    t = FakeClock()
    clock = PhaseClock(clock=t)
    t.advance(1.0)  # start-up
    clock.enter("launch")
    t.advance(2.0)
    clock.enter("prompts")
    t.advance(0.5)
    clock.enter("warm-up 1/4")
    t.advance(0.25)
    clock.enter("warm-up 2/4")  # same group: adds up
    t.advance(0.25)
    clock.enter("measure")
    t.advance(5.0)
    clock.enter("drain")
    t.advance(0.125)
    totals = clock.totals()  # the current phase counted so far
    assert totals == {"engine": 3.0, "prompts": 0.5, "warm-up": 0.5, "measure": 5.0, "drain": 0.125}
    assert sum(totals.values()) == pytest.approx(t.t - 100.0)
    assert list(totals) == [g for g in GROUPS if g in totals]  # run order


def test_cell_share_is_the_difference_since_a_snapshot():
    t = FakeClock()
    clock = PhaseClock(clock=t)
    t.advance(3.0)
    before = clock.totals()
    clock.enter("health")
    t.advance(0.1)
    clock.enter("measure")
    t.advance(2.0)
    clock.enter("save")
    assert clock.since(before) == {"measure": 2.0, "between": 0.1}


def test_phase_forwards_and_times():
    t = FakeClock()
    clock = PhaseClock(clock=t)
    seen: list[tuple[str, float | None]] = []
    phase = Phase(lambda name, deadline: seen.append((name, deadline)), clock)
    phase("ramp", 7.0)
    t.advance(1.5)
    phase("measure")
    assert seen == [("ramp", 7.0), ("measure", None)] and phase.now == "measure"
    assert clock.totals()["ramp"] == 1.5


def test_wall_split_is_the_one_definition():
    s = wall_split({"engine": 2.0, "prompts": 1.0, "prefill": 3.0, "warm-up": 4.0, "ramp": 1.0, "measure": 60.0,
                    "drain": 0.5, "verdict": 1.5, "between": 1.0})  # fmt: skip
    assert s is not None
    assert s.wall_s == 74.0 and s.measurement_s == 63.0 and s.warmup_s == 5.0
    assert s.overhead_s == pytest.approx(6.0) and s.overhead_share == pytest.approx(6.0 / 74.0)
    assert s.line() == "85 % measuring, 7 % warm-up, 8.1 % harness overhead (of 74 s)"
    assert wall_split(None) is None and wall_split({}) is None


def test_resumed_run_adds_its_sessions():
    assert add_totals({"measure": 5.0, "engine": 1.0}, {"measure": 2.5, "verdict": 0.25}) == {"measure": 7.5, "engine": 1.0, "verdict": 0.25}
    assert add_totals(None, {"measure": 1.0}) == {"measure": 1.0}
