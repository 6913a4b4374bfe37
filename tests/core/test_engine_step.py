"""The one step helper (core/engine/step.py) branch by branch, with a fake engine: a step that finishes, one the
engine goes down in (saved as error with the reason, then recovered), one whose recovery fails (the run stops,
the step saved first), one that fails with the engine up, one cancelled (what it had saved as interrupted), and an
engine gone between steps. The real thing — a sim killed or stalled in every phase — is tests/reliability."""

from __future__ import annotations

import io
from typing import Any

import anyio
import httpx
import pytest
from rich.console import Console

from infermatrix.core.engine.contract import EngineError
from infermatrix.core.engine.step import EngineSteps, Phase, StepEnd
from infermatrix.core.engine.watch import WatchedTransport


class FakeEngine:
    """What a step asks of an engine: is it alive, does /health answer, its log, bring it back."""

    kind, base_url, attach = "fake", "http://fake", False

    def __init__(self, recover_fails: bool = False):
        self.dead = False
        self.recovered = 0
        self.recover_fails = recover_fails

    def alive(self) -> bool:
        return not self.dead

    def exit_note(self) -> str:
        return "exited with code 3"

    async def healthy(self, client: Any, timeout: float) -> str | None:
        return "connection refused" if self.dead else None

    def log_tail(self, n: int) -> str:
        return "loading\nsecret-key boom\n"

    def redact(self, text: str) -> str:
        return text.replace("secret-key", "***")

    async def recover(self, client: Any) -> str:
        if self.recover_fails:
            raise EngineError("fake went down again after 3 restarts")
        self.dead = False
        self.recovered += 1
        return "fake restarted"


class Seen:
    def __init__(self) -> None:
        self.saved: list[StepEnd[Any]] = []
        self.interrupted = 0
        self.begun = 0
        self.forgot = 0
        self.phases: list[str] = []


def _steps(engine: FakeEngine, seen: Seen) -> tuple[EngineSteps, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False, color_system=None)
    transport = WatchedTransport(httpx.AsyncHTTPTransport())
    phase = Phase(lambda name, deadline: seen.phases.append(name))

    def forget() -> None:
        seen.forgot += 1

    steps = EngineSteps(engine, httpx.AsyncClient(transport=transport), transport, console, phase, 30.0, on_recover=forget)  # type: ignore[arg-type]
    return steps, out


async def _step(steps: EngineSteps, seen: Seen, fn: Any) -> StepEnd[Any]:
    def interrupted() -> None:
        seen.interrupted += 1

    def begin() -> None:
        seen.begun += 1

    return await steps.step(fn, seen.saved.append, interrupted, begin)


def test_a_step_that_finishes_is_saved_with_its_value() -> None:
    engine, seen = FakeEngine(), Seen()
    steps, _ = _steps(engine, seen)

    async def measure() -> int:
        steps.phase("measure")
        return 42

    end = anyio.run(_step, steps, seen, measure)
    assert end.value == 42 and not end.failed and not end.down
    assert [e.value for e in seen.saved] == [42]
    assert seen.begun == 1 and seen.interrupted == 0 and engine.recovered == 0 and seen.forgot == 0
    assert seen.phases == ["health", "measure"]  # the engine checked first, then the step's own phases


def test_an_engine_that_dies_in_a_step_saves_it_as_error_with_the_reason_then_recovers() -> None:
    engine, seen = FakeEngine(), Seen()
    steps, out = _steps(engine, seen)

    async def measure() -> None:
        steps.phase("ramp")
        engine.dead = True  # the process exits mid-step: the watcher sees it
        await anyio.sleep_forever()

    end = anyio.run(_step, steps, seen, measure)
    assert end.down and end.failed
    [saved] = seen.saved
    assert saved.reason == "engine down during this cell (ramp): fake exited with code 3; last log line: *** boom"
    assert saved.flags["engine_down"] == "fake exited with code 3" and saved.flags["failed_phase"] == "ramp"
    assert "secret-key" not in saved.flags["engine_log_tail"]
    assert engine.recovered == 1 and seen.forgot == 1  # brought back; what was warm in its cache is forgotten
    assert seen.phases[-1] == "recover" and "fake restarted" in out.getvalue()


def test_an_engine_that_cannot_come_back_ends_the_run_after_the_step_is_saved() -> None:
    engine, seen = FakeEngine(recover_fails=True), Seen()
    steps, _ = _steps(engine, seen)

    async def measure() -> None:
        engine.dead = True
        await anyio.sleep_forever()

    with pytest.raises(EngineError, match="went down again"):
        anyio.run(_step, steps, seen, measure)
    assert len(seen.saved) == 1 and seen.saved[0].failed  # the step is stored before the run stops


def test_a_request_that_fails_with_the_engine_up_is_an_error_and_no_recovery() -> None:
    engine, seen = FakeEngine(), Seen()
    steps, _ = _steps(engine, seen)

    async def measure() -> None:
        steps.phase("tokenize")
        request = httpx.Request("POST", "http://fake/tokenize")
        raise httpx.HTTPStatusError("500 Internal Server Error", request=request, response=httpx.Response(500, request=request))

    end = anyio.run(_step, steps, seen, measure)
    assert end.failed and not end.down
    assert end.reason == "failed in tokenize: HTTPStatusError: 500 Internal Server Error"
    assert end.flags["failed_phase"] == "tokenize" and "***" in end.flags["engine_log_tail"]
    assert engine.recovered == 0 and seen.saved == [end]


def test_a_cancelled_step_saves_what_it_had_as_interrupted_and_the_cancel_goes_on() -> None:
    engine, seen = FakeEngine(), Seen()
    steps, _ = _steps(engine, seen)
    reached_after = []

    async def main() -> None:
        started = anyio.Event()

        async def measure() -> None:
            started.set()
            await anyio.sleep_forever()

        async with anyio.create_task_group() as tg:

            async def run() -> None:
                await _step(steps, seen, measure)
                reached_after.append(True)  # never: the cancel is not swallowed

            tg.start_soon(run)
            await started.wait()
            tg.cancel_scope.cancel()  # Ctrl-C

    anyio.run(main)
    assert seen.interrupted == 1 and seen.saved == [] and reached_after == []
    assert engine.recovered == 0


def test_an_engine_gone_between_steps_is_brought_back_first_and_no_step_is_blamed() -> None:
    engine, seen = FakeEngine(), Seen()
    steps, out = _steps(engine, seen)
    engine.dead = True

    async def measure() -> str:
        assert engine.alive()  # the step runs on an engine that is there
        return "ok"

    end = anyio.run(_step, steps, seen, measure)
    assert end.value == "ok" and not end.failed
    assert engine.recovered == 1 and "between cells" in out.getvalue()
    assert seen.phases[:2] == ["health", "recover"]


def test_phase_forwarding_lasts_for_the_block() -> None:
    first: list[str] = []
    inner: list[str] = []
    phase = Phase(lambda name, deadline: first.append(name))
    with phase.forwarding(lambda name, deadline: inner.append(name)):
        phase("measure")
    phase("save")
    assert inner == ["measure"] and first == ["save"] and phase.now == "save"
