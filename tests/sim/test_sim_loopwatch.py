"""The sim's record of its own lateness (plugins/sim/loopwatch.py): a stamp taken while its loop could not run is
held by the stall, and /debug/truth says so per request (``received_held_s``).

The stall is the loop blocked on purpose (``time.sleep`` inside it), so every bound below is the block's own length,
not a guess about the machine's load."""

from __future__ import annotations

import asyncio
import time

import pytest

from infermatrix.plugins.sim.loopwatch import TICK_S, LoopWatch
from infermatrix.plugins.sim.profile import load_profile
from infermatrix.plugins.sim.record import window_record
from infermatrix.plugins.sim.scheduler import Scheduler
from infermatrix.plugins.sim.seq import Seq

BLOCK_S = 0.2


def test_a_stamp_taken_as_the_loop_comes_back_from_a_stall_is_held_by_it():
    async def main() -> tuple[LoopWatch, float, float]:
        watch = LoopWatch()
        task = asyncio.create_task(watch.run())
        await asyncio.sleep(3 * TICK_S)  # the sleeper ticking
        before = time.monotonic()
        time.sleep(BLOCK_S)  # the loop cannot run: a busy or descheduled sim
        back = time.monotonic()  # a read that runs as the loop comes back, before the late tick's own callback
        await asyncio.sleep(2 * TICK_S)
        task.cancel()
        return watch, before, back

    watch, before, back = asyncio.run(main())
    # The tick due within one period of the block's start woke after it: the stamp taken on the way back waited.
    assert watch.held_s(back) >= BLOCK_S - TICK_S, watch.late
    due, woke = next((d, w) for d, w in watch.late if d <= back <= w)  # the late tick whose stretch holds it ...
    assert due <= before + TICK_S  # ... was due by one tick into the block
    assert watch.held_s(None) == 0.0
    assert watch.held_s(before - 60.0) == 0.0  # before the first tick: nothing held it
    watch.clear()
    assert watch.late == [] and watch.held_s(back) == 0.0


def test_the_truth_and_window_records_carry_each_receipts_hold():
    sched = Scheduler(load_profile("tiny"))
    sched.loop_watch.late.extend([(10.0, 10.3)])  # the loop stalled 0.3 s from t = 10
    held = Seq("cmpl-0", "completions", 64, (), 8, request_id="held")
    held.received = 10.25  # read during the stall
    free = Seq("cmpl-1", "completions", 64, (), 8, request_id="free")
    free.received = 11.0
    sched.records.extend([held, free])
    by_id = {r["request_id"]: r for r in sched.truth()["requests"]}
    assert by_id["held"]["received_held_s"] == pytest.approx(0.3) and by_id["free"]["received_held_s"] == 0.0
    window = {r["request_id"]: r for r in window_record(sched, 9.0, 12.0)["requests"]}
    assert window["held"]["received_held_s"] == pytest.approx(0.3) and window["free"]["received_held_s"] == 0.0
