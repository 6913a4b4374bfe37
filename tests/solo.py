"""``@pytest.mark.solo``: a test that needs the machine's cores to itself (issue 28 item 7).

The README's test command runs the suite on three pytest-xdist workers (``-n 3 --dist loadfile`` in pyproject's
addopts): most slow tests wait on a launched sim's windows and use a fraction of a core, so three of them side by side
cut the wall time without moving their numbers (a fourth saturated the two cores: docs/performance.md). Some cannot
share: a real engine on CPU (vLLM, llama.cpp) takes every core it finds, a 256-stream cell needs both cores to keep its
client ahead, and two local Ray clusters side by side break each other. Those carry the ``solo`` mark (module-wide, as
``pytestmark``; a ``vllm`` or ``llamacpp`` test is solo without it), and while one runs no other test runs beside it. Modules that share something other than
the cores — a local Ray cluster (``ray.init`` finds another module's) — carry ``holds("ray")``: a lock of that name
held from the module's first test to its last, so two such modules never overlap.

How: a readers-writer lock across the workers on two files in a directory named by xdist's run id. Every test holds
the *machine* lock shared while it runs (set-up, call and tear-down, so a module fixture that launches an engine is
covered); a solo module holds it exclusively from its first test to its last (with ``--dist loadfile`` a module's tests
run back to back on one worker). Writers win: each test first passes a *turnstile* that a solo test keeps
closed while it waits and runs, so a solo test never starves behind a stream of shared ones. ``flock`` locks die with
their process, so a crashed worker leaves nothing held. The solo modules run first, and shared tests wait until all of
them have ended (the *solo phase*, bounded by SOLO_PHASE_MAX_S). A solo module's worker also runs at nice SOLO_NICE
(where the user may raise priority), and so does every process it starts: that ranks them above the rest of pytest's
session, not above another session's load (see SOLO_NICE; docs/performance.md, "Beside a CPU burner"). Without xdist
(``-n 0``, ``-p no:xdist``) this does nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import IO
from pathlib import Path

import pytest

from infermatrix.core.measure.priority import client_priority

MARK = "solo"
HOLDS = "holds"  # @pytest.mark.holds("ray"): modules holding the same name never run side by side
REAL_ENGINES = ("vllm", "llamacpp")  # a real engine on CPU takes every core it finds: solo without saying so
# A solo module's priority (inherited by what it starts; -10 is configs/vllm-cpu-tiny.toml's client_nice). It ranks the
# module's processes above the rest of pytest's *session* — idle workers, a burner started from the same shell — and no
# further: with the kernel's autogroups (sched_autogroup_enabled = 1) sessions share the CPU as groups, and an engine
# runs in a session of its own. Beside a burner in pytest's session a vLLM burst's client still waited up to 442 ms
# on the run queue; the product now disowns such a burst (core/load/stall.py). docs/performance.md, "Beside a CPU burner".
SOLO_NICE = -10


def is_solo(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) is not None for m in (MARK, *REAL_ENGINES))


def lock_dir(config: pytest.Config) -> Path | None:
    """The lock files' directory, shared by one run's workers (None outside an xdist worker). Read from the worker's
    own input, not the environment: a pytest a test starts inherits a worker's environment, and would wait on it."""
    worker = getattr(config, "workerinput", None)
    if worker is None:
        return None
    d = Path(tempfile.gettempdir()) / f"infermatrix-pytest-{worker['testrunuid']}"
    d.mkdir(exist_ok=True)
    return d


@contextmanager
def machine(d: Path, solo: bool) -> Iterator[None]:
    """Hold the machine: exclusively for a solo test, shared otherwise (writer preference through the turnstile)."""
    with open(d / "turnstile", "a+") as turnstile, open(d / "machine", "a+") as held:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(held, fcntl.LOCK_EX if solo else fcntl.LOCK_SH)
        finally:
            if not solo:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
            if solo:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


# The order the workers take modules in (``--dist loadfile --no-loadscope-reorder``: xdist's default would re-sort the
# modules by their number of tests). Solo modules first: three workers each take one, and they run one after another
# with nothing to drain — a solo module that starts mid-suite waits for the longest shared test in flight on every
# other worker (up to 100 s), and those workers idle meanwhile. Then the longest shared modules (seconds from a full
# run's per-test timeline, 2026-12-06, less that day's trims), so no minute-long file starts last beside idle workers;
# then collection order.
LONG_FIRST = (
    "tests/fidelity/test_fidelity_matrix.py",  # 126 s
    "tests/reliability/test_rel_phases.py",  # 119 s (many short tests)
    "tests/distributed/test_sweep_ray.py",  # 113 s
    "tests/slo/test_slo_search_sim.py",  # 95 s
    "tests/distributed/test_sweep_grid_sim.py",  # 95 s
    "tests/fidelity/test_fidelity_reference.py",  # 88 s
    "tests/reliability/test_rel_kill.py",  # 85 s
    "tests/report/test_compare_intervals.py",  # 60 s
    "tests/telemetry/test_telemetry_sim.py",  # 56 s
    "tests/fidelity/test_fidelity_trace.py",  # 44 s
    "tests/core/test_cache_reset_abort.py",  # 42 s
    "tests/distributed/test_tune_sim.py",  # 41 s
    "tests/slo/test_slo_sim.py",  # 41 s
    "tests/report/test_report_sweep.py",  # 39 s
)


def run_order(item: pytest.Item) -> tuple[int, int]:
    """Sort key: solo modules, then LONG_FIRST in its order, then the rest (a stable sort keeps each module whole)."""
    path = item.nodeid.split("::", 1)[0]
    return (0 if is_solo(item) else 1, LONG_FIRST.index(path) if path in LONG_FIRST else len(LONG_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=run_order)


# The solo phase: shared tests start once every solo module of the run has ended. Without it, a worker that finished its
# last solo module took a shared one (up to 137 s, most of it waiting on a sim) while another worker's solo module was
# still queued: that module waited for the drain, the turnstile held every other worker back meanwhile, and the machine
# sat at 5-15 % of its cores for minutes (measured, 2026-12-06: ~200 s of the solo part's wall time beyond its tests').
SOLO_PHASE_MAX_S = 1200.0  # a solo module that never ends (its worker lost mid-module) holds shared tests back this long
_solo_modules: frozenset[str] = frozenset()  # this run's solo modules, from the collection (the same in every worker)
_solo_phase_over = False


def module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def pytest_collection_finish(session: pytest.Session) -> None:
    global _solo_modules
    _solo_modules = frozenset(module_of(i) for i in session.items if is_solo(i))


def done_mark(d: Path, module: str) -> Path:
    """The file a solo module leaves when it has ended (its last test torn down)."""
    return d / f"solo-done-{hashlib.sha1(module.encode()).hexdigest()[:16]}"


def wait_for_solo_phase(d: Path, modules: frozenset[str], max_s: float = SOLO_PHASE_MAX_S, poll_s: float = 0.2) -> bool:
    """Block until every module in ``modules`` has left its done mark; False when ``max_s`` passed first."""
    end = time.monotonic() + max_s
    while not all(done_mark(d, m).exists() for m in modules):
        if time.monotonic() > end:
            return False
        time.sleep(poll_s)
    return True


_held: dict[str, IO[str]] = {}  # this worker's module-wide locks, by name


def _hold_module_locks(d: Path, item: pytest.Item) -> None:
    """Take the module's named locks at its first test (before the machine lock: a waiter for a name holds nothing
    another test waits for, so no cycle)."""
    for mark in item.iter_markers(HOLDS):
        name = mark.args[0]
        if name not in _held:
            f = open(d / f"holds-{name}", "a+")  # noqa: SIM115 - held across tests, closed by _release_module_locks
            fcntl.flock(f, fcntl.LOCK_EX)
            _held[name] = f


def _release_module_locks(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Give the names back after the module's last test (its fixtures, a Ray cluster, are torn down by then)."""
    keep = {m.args[0] for m in nextitem.iter_markers(HOLDS)} if nextitem is not None and nextitem.module is item.module else set()
    for name in [n for n in _held if n not in keep]:
        _held.pop(name).close()  # closing the file drops its flock


_solo_hold: ExitStack | None = None  # this worker's exclusive hold of the machine, kept across a solo module's tests


def _enter_solo(d: Path, item: pytest.Item) -> bool:
    """Take the machine exclusively at a solo module's first test and keep it to the module's last: one drain of the
    other workers per module, not one per test (a per-test lock let a long shared test slip in between two of a
    module's tests, and each of them waited for it to end). True when this worker holds it for the item."""
    global _solo_hold
    if _solo_hold is None and is_solo(item):
        stack = ExitStack()
        stack.enter_context(machine(d, solo=True))
        stack.enter_context(client_priority(SOLO_NICE, {}))  # the product's own: set, and put back after
        _solo_hold = stack
    return _solo_hold is not None


def _leave_solo(d: Path, item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Give the machine back after the solo module's last test (its fixtures, a launched engine, are torn down by then),
    and leave the module's done mark for the shared tests waiting for the solo phase to end."""
    global _solo_hold
    if _solo_hold is not None and (nextitem is None or nextitem.module is not item.module):
        _solo_hold.close()
        _solo_hold = None
        done_mark(d, module_of(item)).touch()


def _shared_after_solo_phase(d: Path) -> None:
    """A shared test's first wait: the solo phase over (checked once per worker: after it, no solo module is left)."""
    global _solo_phase_over
    if not _solo_phase_over:
        if not wait_for_solo_phase(d, _solo_modules):
            warnings.warn(f"tests/solo.py: solo modules still unfinished after {SOLO_PHASE_MAX_S:.0f} s; shared tests go on", stacklevel=1)
        _solo_phase_over = True


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outermost: the wait is outside pytest-timeout's clock
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    d = lock_dir(item.config)
    if d is None:
        yield
        return
    _hold_module_locks(d, item)
    try:
        if _enter_solo(d, item):
            yield
        else:
            _shared_after_solo_phase(d)
            with machine(d, solo=False):
                yield
    finally:
        _leave_solo(d, item, nextitem)
        _release_module_locks(item, nextitem)
