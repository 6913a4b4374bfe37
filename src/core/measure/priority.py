"""The client's scheduling priority while a cell runs (``matrix.client_nice``).

When the engine shares the client's cores (a CPU engine, a laptop) the client needs little CPU but needs it
*on time*: a client process that waits for a core stamps chunks late, which the client verdict then reports
(docs/metrics.md). A negative nice value for the measuring process fixes that at no cost to the engine's
throughput worth measuring. It is raised only while a cell runs — worker processes started in the cell
inherit it; an engine restarted between cells does not — and put back after. Lowering nice below 0 needs
the privilege to do so (root or CAP_SYS_NICE); without it the cell runs at normal priority and says why.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

__all__ = ["client_priority"]


@contextlib.contextmanager
def client_priority(nice: int | None, report: dict[str, object]) -> Iterator[None]:
    """Run the block at ``nice`` (None: unchanged); ``report`` gets ``nice`` (what applied) and ``error``."""
    if nice is None or not hasattr(os, "setpriority"):
        yield
        return
    before = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
        report["nice"] = nice
    except OSError as exc:
        report["nice"], report["error"] = before, f"could not set nice {nice}: {exc.strerror}"
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, before)
