"""``@pytest.mark.solo``: a test that needs the machine's cores to itself (issue 28 item 7).

The README's test command runs the suite on two pytest-xdist workers (``-n 2 --dist loadfile`` in pyproject's
addopts): most slow tests wait on a launched sim's windows and use a fraction of a core, so two of them side by side
halve the wall time without moving their numbers. Some cannot share: a real engine on CPU (vLLM, llama.cpp) takes
every core it finds, a 256-stream cell needs both cores to keep its client ahead, and two local Ray clusters side by
side break each other. Those carry the ``solo`` mark (module-wide, as ``pytestmark``; a ``vllm`` or ``llamacpp``
test is solo without it), and while one runs no other test runs beside it.

How: a readers-writer lock across the workers on two files in a directory named by xdist's run id. Every test holds
the *machine* lock shared while it runs (set-up, call and tear-down, so a module fixture that launches an engine is
covered); a solo test holds it exclusively. Writers win: each test first passes a *turnstile* that a solo test keeps
closed while it waits and runs, so a solo test never starves behind a stream of shared ones. ``flock`` locks die with
their process, so a crashed worker leaves nothing held. Without xdist (``-n 0``, ``-p no:xdist``) this does nothing.
"""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

MARK = "solo"
REAL_ENGINES = ("vllm", "llamacpp")  # a real engine on CPU takes every core it finds: solo without saying so


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


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outermost: the wait is outside pytest-timeout's clock
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    d = lock_dir(item.config)
    if d is None:
        yield
        return
    with machine(d, is_solo(item)):
        yield
