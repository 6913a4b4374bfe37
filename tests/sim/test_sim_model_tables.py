"""The sim's engine model on its own (moved from tests/fidelity/test_fidelity_reference.py, which checks the fitted
profile against the reference report): the prefill and front-end tables, and the processor-shared intake that
makes TTFT independent of the window's length — judged by the model's own stamps, not a client's clock."""

from __future__ import annotations

import asyncio
import json

import pytest

from infermatrix.plugins.sim.profile import SimProfile, load_profile
from infermatrix.plugins.sim.scheduler import Scheduler
from infermatrix.plugins.sim.seq import Seq

PROFILE = "h200x4-qwen3.8-flash-next"


def test_prefill_table_and_attention_cost():
    table = SimProfile(prefill_base_ms=1.0, prefill_table=[[16384, 400.0], [8192, 100.0]])
    assert table.prefill_ms(8192, 0) == pytest.approx(101.0)
    assert table.prefill_ms(4096 + 100, 100) == pytest.approx(51.0)  # from (0, 0); only uncached tokens count
    assert table.prefill_ms(12288, 0) == pytest.approx(251.0)
    assert table.prefill_ms(24576, 0) == pytest.approx(701.0)  # the last segment's slope beyond it
    attn = SimProfile(prefill_base_ms=0.0, prefill_tps=1000.0, prefill_attn_ms=2.0)
    # 1000 new tokens after 3000 cached: 1000 ms of tokens + (1000 x 3000 + 1000 x 1001 / 2) pairs x 2 ms / 1e6.
    assert attn.prefill_ms(4000, 3000) == pytest.approx(1000.0 + 2.0 * (3_000_000 + 500_500) / 1e6)
    with pytest.raises(ValueError):
        SimProfile(prefill_table=[[8192, 100.0], [16384, 50.0]])


def test_frontend_table_interpolates_and_is_flat_beyond():
    p = load_profile(PROFILE)
    t = p.frontend_table
    assert t is not None and p.has_frontend
    assert p.frontend_ms(8192, 1) == pytest.approx(t.ms[0][0])
    mid = p.frontend_ms((8192 + 16384) // 2, 1)
    assert mid == pytest.approx((t.ms[0][0] + t.ms[1][0]) / 2)
    assert p.frontend_ms(8192, 3) == pytest.approx((t.ms[0][1] + t.ms[0][2]) / 2)
    assert p.frontend_ms(262143, 1) == t.ms[-1][0] and p.frontend_ms(100, 1000) == t.ms[0][-1]
    assert not load_profile("tiny").has_frontend  # off by default: today's model unchanged


# The submits of one "burst" happen in one event-loop turn, microseconds apart: that, and float rounding, is all
# that may separate the model's intake delays from its formula.
SAME_TURN_S = 1e-3


def test_intake_is_processor_shared_so_bursts_and_restarts_wait_alike(tmp_path):
    """n requests arriving at once and one arriving while n - 1 decode get the same intake delay: the scheduler's own
    record (``accepted`` - ``arrived``, the model's clock, whatever the event loop's lateness)."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"base": "tiny", "frontend_base_ms": 100.0, "frontend_load": 0.5}))
    profile = load_profile(str(path))

    async def until(cond) -> None:
        while not cond():
            await asyncio.sleep(0.005)

    async def main() -> tuple[list[Seq], list[Seq], Seq]:
        sched = Scheduler(profile)
        sched.start()
        try:
            alone = Seq("a", "completions", 64, (), 1)
            sched.submit(alone)
            await asyncio.wait_for(until(lambda: alone.finished is not None), 30)
            burst = [Seq(f"b{i}", "completions", 64, (), 1) for i in range(4)]
            for s in burst:
                sched.submit(s)
            await asyncio.wait_for(until(lambda: all(s.finished is not None for s in burst)), 30)
            # 2,000 tokens each: they fit the KV budget and still decode when the late one is accepted
            holders = [Seq(f"h{i}", "completions", 64, (), 2_000, ignore_eos=True) for i in range(3)]
            for s in holders:
                sched.submit(s)
            await asyncio.wait_for(until(lambda: all(s.first_token is not None for s in holders)), 30)
            late = Seq("late", "completions", 64, (), 1)  # the 4th request in the server, like a restart at N = 4
            sched.submit(late)
            await asyncio.wait_for(until(lambda: late.accepted is not None), 30)
            assert all(s.finished is None for s in holders)  # still decoding: 4 in the server throughout
            for s in holders:
                sched.abort(s)
            return [alone], burst, late
        finally:
            await sched.stop()

    (alone,), burst, late = asyncio.run(main())
    intake = lambda s: s.accepted - s.arrived  # noqa: E731
    assert intake(alone) == pytest.approx(0.100, abs=SAME_TURN_S)
    expected = 0.100 * (1 + 0.5 * 3)  # 4 in the server: 250 ms each
    assert [intake(s) for s in burst] == pytest.approx([expected] * 4, abs=SAME_TURN_S)  # shared, not queued
    assert intake(late) == pytest.approx(expected, abs=SAME_TURN_S)
