"""Parsing SLO specs (docs/slo.md): ``KEY=VALUE,...`` limits, MLPerf presets, ``[slo]`` tables.

Keys are ``<metric>[_p<P>]_<unit>``:

- ``ttft_ms``, ``ttfo_ms``, ``tpot_ms``, ``e2e_ms``: upper limits in milliseconds (time to first token, time to
  the first answer token after any reasoning, time per output token after the first, end-to-end latency);
- ``tps_min``: a lower limit on a request's own decode rate (tok/s per user);
- with ``_p<P>`` (``ttft_p99_ms``, ``tps_p99_min``) the limit is on the cell's P-th percentile
  (for ``tps``: P % of requests at least that fast); without, every request must meet it;
- ``attainment=0.9``: the cell needs at least this share of good requests (DistServe's 90 %); with it,
  limits without a percentile are judged through attainment instead of on every request.

A request is *good* when it meets every limit, whatever the percentile (docs/metrics.md, SLO).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from infermatrix.core.config import ConfigError

__all__ = ["METRICS", "MLPERF_PRESETS", "Limit", "SloSpec", "parse_slo", "slo_from_table"]

# metric -> (unit suffix, direction): 'max' limits are upper bounds, 'min' lower bounds.
METRICS: dict[str, tuple[str, str]] = {"ttft": ("ms", "max"), "ttfo": ("ms", "max"), "tpot": ("ms", "max"), "e2e": ("ms", "max"), "tps": ("min", "min")}
_ALIASES = {"e2el": "e2e", "itl": "tpot", "tbt": "tpot"}
_KEY = re.compile(r"^(?P<metric>[a-z0-9]+?)(?:_p(?P<p>\d+(?:\.\d+)?))?_(?P<unit>ms|min)$")

# MLPerf Inference server scenario: p99 TTFT and p99 TPOT limits in ms, per benchmark.
MLPERF_PRESETS: dict[str, tuple[float, float]] = {
    "llama2-70b": (2000.0, 200.0),
    "llama2-70b:interactive": (450.0, 40.0),
    "llama3.1-8b": (2000.0, 100.0),
    "llama3.1-8b:interactive": (500.0, 30.0),
    "llama3.1-405b": (6000.0, 175.0),
    "deepseek-r1": (2000.0, 80.0),
    "gpt-oss-120b": (3000.0, 80.0),
}


@dataclass(frozen=True)
class Limit:
    """One limit: ``metric`` (ttft|ttfo|tpot|e2e|tps) at ``percentile`` (None: every request)."""

    metric: str
    percentile: float | None
    value: float

    @property
    def column(self) -> str:
        """The stored metric name: ttft_ms, ttfo_ms, tpot_ms, e2e_ms, tps."""
        return self.metric if self.metric == "tps" else f"{self.metric}_ms"

    @property
    def key(self) -> str:
        unit, _ = METRICS[self.metric]
        p = "" if self.percentile is None else f"_p{_num(self.percentile)}"
        return f"{self.metric}{p}_{unit}"


@dataclass(frozen=True)
class SloSpec:
    """A named set of limits (and an optional attainment goal)."""

    name: str
    limits: tuple[Limit, ...]
    attainment: float | None = None
    source: str = field(default="--slo", compare=False)

    def rows(self) -> list[tuple[str, float | None, float]]:
        """(metric column, percentile, value) rows as stored in ``slo_limits``."""
        out: list[tuple[str, float | None, float]] = [(lim.column, lim.percentile, lim.value) for lim in self.limits]
        if self.attainment is not None:
            out.append(("attainment", None, self.attainment))
        return out


def _num(x: float) -> str:
    return f"{x:g}"


def _preset(name: str) -> SloSpec:
    key = name.removeprefix("mlperf:").strip().lower().replace("-interactive", ":interactive")
    if key not in MLPERF_PRESETS:
        raise ConfigError(f"--slo {name}: unknown preset (known: {', '.join('mlperf:' + k for k in MLPERF_PRESETS)})")
    ttft, tpot = MLPERF_PRESETS[key]
    return SloSpec(f"mlperf:{key}", (Limit("ttft", 99.0, ttft), Limit("tpot", 99.0, tpot)), source="mlperf")


def _limit(key: str, raw: Any, where: str) -> Limit | float:
    """One ``key=value``: a Limit, or the attainment goal (a float)."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {key}={raw!r}: the value must be a number") from None
    if key == "attainment":
        if not 0 < value <= 1:
            raise ConfigError(f"{where}: attainment={raw}: must be a share in (0, 1], e.g. 0.9")
        return value
    m = _KEY.match(key)
    metric = _ALIASES.get(m.group("metric"), m.group("metric")) if m else None
    if m is None or metric not in METRICS or METRICS[metric][0] != m.group("unit"):
        raise ConfigError(
            f"{where}: unknown limit {key!r} (keys: ttft_ms, ttfo_ms, tpot_ms, e2e_ms, tps_min, with _p<P> for a percentile "
            "such as ttft_p99_ms; attainment; or a preset such as mlperf:llama3.1-8b)"
        )
    p = float(m.group("p")) if m.group("p") is not None else None
    if p is not None and not 0 < p <= 100:
        raise ConfigError(f"{where}: {key}: the percentile must be in (0, 100]")
    if value <= 0:
        raise ConfigError(f"{where}: {key}={raw}: the limit must be positive")
    return Limit(metric, p, value)


def _build(items: list[tuple[str, Any]], where: str, name: str | None, source: str) -> SloSpec:
    limits: dict[tuple[str, float | None], Limit] = {}
    goal = None
    for key, raw in items:
        got = _limit(key.strip().lower(), raw, where)
        if isinstance(got, Limit):
            limits[(got.metric, got.percentile)] = got
        else:
            goal = got
    if not limits:
        raise ConfigError(f"{where}: no limits given (e.g. ttft_p99_ms=2000,tpot_p99_ms=50)")
    ordered = tuple(sorted(limits.values(), key=lambda lim: (list(METRICS).index(lim.metric), lim.percentile or 0)))
    canonical = ",".join([f"{lim.key}={_num(lim.value)}" for lim in ordered] + ([f"attainment={_num(goal)}"] if goal is not None else []))
    return SloSpec(name or canonical, ordered, goal, source=source)


def parse_slo(text: str) -> SloSpec:
    """``ttft_p99_ms=2000,tpot_p99_ms=50`` or ``mlperf:NAME``; one-line ConfigError otherwise."""
    text = (text or "").strip()
    if not text:
        raise ConfigError("--slo: empty (e.g. --slo ttft_p99_ms=2000,tpot_p99_ms=50 or --slo mlperf:llama3.1-8b)")
    if text.lower().startswith("mlperf:"):
        return _preset(text)
    items = []
    for part in text.split(","):
        key, sep, raw = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--slo {text}: expected KEY=VALUE pairs separated by commas, e.g. ttft_p99_ms=2000,tpot_p99_ms=50")
        items.append((key, raw.strip()))
    return _build(items, f"--slo {text}", None, "--slo")


def slo_from_table(table: dict[str, Any]) -> SloSpec:
    """The config's ``[slo]`` table: limit keys, or ``preset = "mlperf:NAME"``; ``name`` optional."""
    data = dict(table)
    name = data.pop("name", None)
    preset = data.pop("preset", None)
    if preset is not None:
        if data:
            raise ConfigError(f"slo: preset {preset!r} takes no other limits (found {', '.join(sorted(data))})")
        spec = _preset(str(preset))
        return SloSpec(str(name), spec.limits, spec.attainment, "config") if name else SloSpec(spec.name, spec.limits, spec.attainment, "config")
    return _build(list(data.items()), "slo", str(name) if name else None, "config")
