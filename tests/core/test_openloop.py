"""The open-loop sender's dispatch rule and a point's verdict, with an injected clock (no real time)."""

import anyio
import pytest

from infermatrix.core.arrival_spec import parse_arrival
from infermatrix.core.load.arrivals import schedule
from infermatrix.core.load.openloop import LAG_FLOOR_MS, judge_point, lag_bound_ms, send_schedule


class FakeClock:
    """Virtual time: sleeping advances it at once, after letting every ready task run to its next wait."""

    def __init__(self) -> None:
        self.t = 100.0

    def now(self) -> float:
        return self.t

    async def sleep_until(self, t: float) -> None:
        for _ in range(10):  # a task's first await may itself be a checkpoint (a free semaphore's acquire)
            await anyio.lowlevel.checkpoint()
        self.t = max(self.t, t)


async def _until(pred) -> None:
    with anyio.fail_after(2):
        while not pred():
            await anyio.lowlevel.checkpoint()


@pytest.mark.anyio
async def test_every_request_leaves_at_its_scheduled_time_while_earlier_ones_are_still_running():
    clock = FakeClock()
    offsets = schedule(parse_arrival("poisson"), 50, 2.0, seed=7)
    launched: list[tuple[int, float]] = []
    done = anyio.Event()

    async def launch(i: int) -> None:
        launched.append((i, clock.now()))
        await done.wait()  # no request ends before all are sent: a sender that waited on them would hang

    async with anyio.create_task_group() as tg:
        result = {}

        async def send() -> None:
            result["plan"] = await send_schedule(offsets, launch, clock=clock, lead_s=0.5)

        tg.start_soon(send)
        await _until(lambda: len(launched) == len(offsets))
        done.set()
    plan = result["plan"]
    assert plan.origin == 100.5
    assert [i for i, _ in launched] == list(range(len(offsets)))
    assert [t for _, t in launched] == [plan.origin + off for off in offsets]
    assert all(s.released == s.scheduled and s.queue_s == 0 for s in plan.sent)


@pytest.mark.anyio
async def test_an_in_flight_cap_queues_in_order_and_the_wait_counts_from_the_scheduled_time():
    clock = FakeClock()
    offsets = [0.0, 1.0, 2.0, 3.0]
    gates = [anyio.Event() for _ in offsets]
    running: list[int] = []
    most = [0]

    async def launch(i: int) -> None:
        running.append(i)
        most[0] = max(most[0], len(running))
        await gates[i].wait()
        running.remove(i)

    result = {}
    async with anyio.create_task_group() as tg:
        async def send() -> None:
            result["plan"] = await send_schedule(offsets, launch, clock=clock, max_in_flight=1, lead_s=0.0)

        tg.start_soon(send)
        await _until(lambda: clock.t >= 103.0)  # every request due: three wait behind the first
        for _ in range(20):
            await anyio.lowlevel.checkpoint()
        for i in range(4):  # each request takes 10 virtual seconds
            await _until(lambda i=i: running == [i])
            clock.t = 100.0 + 10 * (i + 1)
            gates[i].set()
    plan = result["plan"]
    assert most[0] == 1
    assert [s.released for s in plan.sent] == [100.0, 110.0, 120.0, 130.0]
    assert [s.queue_s for s in plan.sent] == [0.0, 9.0, 18.0, 27.0]
    assert plan.max_queue == 3


def test_the_lag_bound_is_a_share_of_the_mean_gap_with_a_floor():
    assert lag_bound_ms(1.0) == 100.0  # 10 % of a 1 s gap
    assert lag_bound_ms(100.0) == LAG_FLOOR_MS  # 10 % of 10 ms is under the floor


def test_a_point_on_schedule_is_valid_and_a_late_or_batched_one_is_client_bound():
    arrival = parse_arrival("poisson")
    sched = schedule(arrival, 20, 10.0, seed=3)
    check, status, reason = judge_point(arrival, 20, 10.0, sched, [s + 0.001 for s in sched])
    assert (status, reason) == ("valid", None)
    assert check.achieved_rate == pytest.approx(len(sched) / 10.0)
    # A client that fell 0.5 s behind for the second half: the lag says so, and the rate it achieved is lower.
    late = [s + (0.5 if s > 5 else 0.0) + 0.05 * i / len(sched) for i, s in enumerate(sched)]
    check, status, reason = judge_point(arrival, 20, 10.0, sched, late, max_in_flight=2, queued=40)
    assert status == "client_bound" and "schedule lag p99" in reason and "in-flight cap of 2" in reason
    assert check.achieved_rate < len(sched) / 10.0
    # A client that wakes every 0.5 s and sends what is due: small lag bound exceeded AND the fit rejected.
    batched = [((s // 0.5) + 1) * 0.5 for s in sched]
    _, status, reason = judge_point(arrival, 20, 10.0, sched, batched)
    assert status == "client_bound" and "fail the poisson fit" in reason


def test_load_config_and_flags_say_one_line_what_is_wrong():
    from infermatrix.cli.load_flags import apply_load_flags
    from infermatrix.core.config import ConfigError
    from infermatrix.core.plugins import get_plugin_manager
    from infermatrix.core.registry import validate_config

    pm = get_plugin_manager()
    cfg = validate_config(pm, {"engine": {"kind": "openai", "base_url": "http://x"}, "load": [{"rate": 2, "arrival": "Gamma:0.5", "context": "1K"}]})
    assert (cfg.load[0].arrival, cfg.load[0].context, cfg.load[0].max_in_flight) == ("gamma:0.5", 1024, None)
    for bad, msg in (({"rate": 0}, "load.0.rate"), ({"rate": 1, "arrival": "burst"}, "expected poisson"), ({"rate": 1, "rps": 2}, "unknown field")):
        with pytest.raises(ConfigError, match=msg):
            validate_config(pm, {"engine": {"kind": "openai", "base_url": "http://x"}, "load": [bad]})
    data: dict = {"load": [{"rate": 9}]}
    apply_load_flags(data, "2, 4.5", "constant", "5", "3")
    assert data["load"] == [{"rate": 2.0, "arrival": "constant", "duration_s": 5.0, "max_in_flight": 3},
                            {"rate": 4.5, "arrival": "constant", "duration_s": 5.0, "max_in_flight": 3}]  # fmt: skip
    for args, msg in ((("x", None, None, None), "--rate: 'x' is not a number"), (("-1", None, None, None), "--rate: must be greater"),
                      ((None, "poisson", None, None), "--arrival: give --rate too"), (("1", "gamma:-1", None, None), "--arrival:")):  # fmt: skip
        with pytest.raises(ConfigError, match=msg):
            apply_load_flags({}, *args)
