"""``infermatrix run --rate 2,4,8 --arrival poisson``: open-loop points from the command line (docs/load.md).

Each rate becomes one ``[[load]]`` point after the matrix; given with a config, ``--rate`` replaces the
config's ``[[load]]`` points. The other flags need ``--rate`` (one line says so otherwise).
"""

from __future__ import annotations

from typing import Any, Callable

import click

from infermatrix.cli.common import number_option
from infermatrix.core.config import ConfigError
from infermatrix.core.arrival_spec import parse_arrival

__all__ = ["LOAD_FLAGS", "apply_load_flags", "load_options", "parse_rates", "points_take_max_output"]

LOAD_FLAGS = ("--rate", "--arrival", "--load-duration", "--max-in-flight")


def load_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--rate``, ``--arrival``, ``--load-duration`` and ``--max-in-flight`` (parameters ``rate``, ``arrival``,
    ``load_duration``, ``max_in_flight``) to a command."""
    for flag, metavar, help_text in reversed((
        ("--rate", "R,...", "open-loop points after the matrix, requests/s each, e.g. 2,4,8 (docs/load.md)"),
        ("--arrival", "PROCESS", "with --rate: poisson (default), constant or gamma:K"),
        ("--load-duration", "SECONDS", "with --rate: seconds of arrivals per point (default 30)"),
        ("--max-in-flight", "N", "with --rate: cap on requests in flight; the rest queue (counted as lag)"),
    )):  # fmt: skip
        f = click.option(flag, default=None, metavar=metavar, help=help_text)(f)
    return f


def parse_rates(text: str) -> list[float]:
    """``"2,4,0.5"`` -> ``[2.0, 4.0, 0.5]``, each a positive number of requests per second."""
    out = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        try:
            value = float(item)
        except ValueError:
            raise ConfigError(f"--rate: {item!r} is not a number (requests per second, e.g. --rate 2,4,8)") from None
        if not value > 0 or value == float("inf"):
            raise ConfigError(f"--rate: must be greater than 0 (got {item})")
        out.append(value)
    if not out:
        raise ConfigError("--rate: empty list of rates")
    return out


def apply_load_flags(data: dict[str, Any], rate: str | None, arrival: str | None, duration: str | None, max_in_flight: str | None) -> None:
    """Write the ``[[load]]`` points the flags ask for into ``data`` (nothing without any of them)."""
    if rate is None:
        for flag, value in (("--arrival", arrival), ("--load-duration", duration), ("--max-in-flight", max_in_flight)):
            if value is not None:
                raise ConfigError(f"{flag}: give --rate too (e.g. --rate 2,4,8 {flag} ...)")
        return
    point: dict[str, Any] = {}
    if arrival is not None:
        try:
            point["arrival"] = str(parse_arrival(arrival))
        except ValueError as exc:
            raise ConfigError(f"--arrival: {exc}") from None
    if duration is not None:
        point["duration_s"] = number_option(float, duration, "--load-duration")
    if max_in_flight is not None:
        point["max_in_flight"] = number_option(int, max_in_flight, "--max-in-flight")
    data["load"] = [{"rate": r, **point} for r in parse_rates(rate)]


def points_take_max_output(data: dict[str, Any], max_output: int | None) -> None:
    """``--max-output`` reaches every rate point (``--rate`` or the config's ``[[load]]``) that does not set its own
    ``max_output``: a point's own value > the flag > ``LoadConfig``'s default (docs/load.md, "What shapes a point's
    requests"). Written into the point, so the stored config (and ``resume``) has it. A trace point is left alone:
    each of its requests asks for the trace's own output length."""
    points = data.get("load")
    if max_output is None or not isinstance(points, list):
        return
    for point in points:
        if not isinstance(point, dict) or "max_output" in point:
            continue  # not a table (the config check says so), or the point's own value
        if point.get("kind") not in ("trace", "mixed") and point.get("arrival") != "trace":  # a rate point or a burst
            point["max_output"] = max_output
