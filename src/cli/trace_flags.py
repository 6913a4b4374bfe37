"""``infermatrix run CONFIG --trace FILE [--time-scale X] [--trace-requests N]``: a trace-replay point from the
command line (docs/load.md, "Trace replay"). Like ``--rate``, it replaces the config's ``[[load]]`` points;
the matrix stays as configured and runs first. A trace file that contradicts itself is refused (one line,
exit 2) by the config check, before anything starts."""

from __future__ import annotations

from typing import Any, Callable

import click

from infermatrix.cli.common import number_option
from infermatrix.core.config import ConfigError

__all__ = ["trace_options", "apply_trace_flags"]


def trace_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--trace``, ``--time-scale`` and ``--trace-requests`` to a command."""
    f = click.option("--trace-requests", "trace_requests", default=None, metavar="N",
                     help="with --trace: replay only the first N requests")(f)  # fmt: skip
    f = click.option("--time-scale", "time_scale", default=None, metavar="X",
                     help="with --trace: multiply every timestamp by X (0.5 replays twice as fast)")(f)  # fmt: skip
    return click.option("--trace", "trace_path", default=None, metavar="FILE", type=click.Path(dir_okay=False),
                        help="replay a Mooncake JSONL / Azure / BurstGPT CSV trace at its timestamps after the matrix "
                        "(replaces the config's [[load]]; docs/load.md)")(f)  # fmt: skip


def apply_trace_flags(data: dict[str, Any], trace_path: str | None, time_scale: str | None, trace_requests: str | None) -> None:
    """Write the trace point the flags ask for into ``data`` (nothing without ``--trace``)."""
    if trace_path is None:
        for flag, value in (("--time-scale", time_scale), ("--trace-requests", trace_requests)):
            if value is not None:
                raise ConfigError(f"{flag}: give --trace FILE too")
        return
    point: dict[str, Any] = {"kind": "trace", "path": trace_path}
    if time_scale is not None:
        point["time_scale"] = number_option(float, time_scale, "--time-scale")
    if trace_requests is not None:
        point["max_requests"] = number_option(int, trace_requests, "--trace-requests")
    data["load"] = [point]
