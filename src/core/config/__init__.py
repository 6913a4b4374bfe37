"""Run configuration: pydantic models (``extra="forbid"``), read from TOML, with ``--set`` overrides.

The ``[engine]`` table is a discriminated union over ``kind``; its arms are registered by plugins
through the ``register_engines`` hook, so a third-party engine gets the same validation. The union is
built, and a config validated, in core/registry.py (``validate_config``), which knows the plugins: this
module knows none, so the config layer sits below the engine contract and the registry.

The package: ``base.py`` (the strict model base, ``ConfigError``, the field types tables share), ``load_points.py``
(the ``[[load]]`` points and ``[search]``), this module (the other tables, ``RunConfig``, TOML and ``--set``). It
imports no layer above it; every name stays importable from ``infermatrix.core.config``.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SerializeAsAny, field_validator, model_validator

from infermatrix.core.config.base import ConfigError, Strict
from infermatrix.core.contexts import parse_context
from infermatrix.core.config.load_points import (
    LOAD_TAGS, AnyLoadConfig, BurstLoadConfig, LoadConfig, MixedLoadConfig, SearchConfig, TraceLoadConfig, expand_bursts,
)

__all__ = [
    "RunConfig",
    "Strict",
    "EngineConfig",
    "MatrixConfig",
    "LoopConfig",
    "ValidityConfig",
    "StoreConfig",
    "LoadConfig",
    "SearchConfig",
    "TraceLoadConfig",
    "BurstLoadConfig",
    "MixedLoadConfig",
    "expand_bursts",
    "AnyLoadConfig",
    "LOAD_TAGS",
    "ClientConfig",
    "ConfigError",
    "load_config",
    "apply_overrides",
    "set_path",
    "parse_value",
]


class EngineConfig(Strict):
    """Fields every engine kind has. Subclasses narrow ``kind`` to a ``Literal``."""

    kind: str
    model: str | None = Field(None, description="served model name; asked of /v1/models when omitted")
    base_url: str | None = Field(None, description="attach to a running server instead of launching one")
    api_key_env: str | None = Field(None, description="environment variable that holds the API key")
    api_key_file: str | None = Field(None, description="file that holds the API key")
    ready_timeout_s: float = Field(600.0, gt=0)
    max_restarts: int = Field(3, ge=0, description="launch mode: restart an engine that dies at most this many times")
    reconnect_timeout_s: float = Field(300.0, ge=0, description="attach mode: how long to wait for an endpoint that went down")
    # Capacity overrides, used when the engine can't tell.
    kv_tokens: int | None = Field(None, gt=0)
    max_seqs: int | None = Field(None, gt=0)
    max_model_len: int | None = Field(None, gt=0)
    tokenizer: str | None = Field(None, description="a tokenizer.json, or a model directory holding one: prompts are sized "
                                  "with it (the `tokenizers` package), with no /tokenize or usage requests to the engine")  # fmt: skip

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer_exists(cls, v: str | None) -> str | None:
        # Said before the run exists (a wrong path is a config mistake, not a failed run).
        if v is not None:
            p = Path(v).expanduser()
            if not (p / "tokenizer.json" if p.is_dir() else p).is_file():
                raise ValueError(f"no tokenizer.json at {v}")
            import importlib.util

            if importlib.util.find_spec("tokenizers") is None:
                raise ValueError("needs the `tokenizers` package: pip install 'infermatrix[tokenizer]'")
        return v

    def known_max_model_len(self) -> int | None:
        """``max_model_len`` as known before anything is launched (``None``: ask the server).

        The default is the config's own field; a kind that knows more before launch (a profile) overrides it."""
        return self.max_model_len

    def known_capacity(self) -> tuple[int | None, int | None, str] | None:
        """``(kv_tokens, max_seqs, source)`` as known before launch, or ``None`` (only the engine can tell).

        The default is the config's own overrides; a kind that knows more before launch (a profile) overrides it."""
        if self.kv_tokens is None and self.max_seqs is None:
            return None
        return self.kv_tokens, self.max_seqs, "config"

    def api_key(self) -> str | None:
        """The key, read from the environment or a file (never stored in config or database)."""
        import os

        if self.api_key_env:
            value = os.environ.get(self.api_key_env)
            if not value:
                raise ConfigError(f"engine.api_key_env: environment variable {self.api_key_env} is not set")
            return value
        if self.api_key_file:
            try:
                return Path(self.api_key_file).expanduser().read_text().strip()
            except OSError as exc:
                raise ConfigError(f"engine.api_key_file: cannot read {self.api_key_file}: {exc.strerror}") from None
        return None


AUTO_KIND = "auto"


class AutoEngineConfig(EngineConfig):
    """``[engine] kind = "auto"``: attach to ``base_url`` as whatever engine is recognised there (core/engine/detect.py)."""

    kind: Literal["auto"] = "auto"
    base_url: str = Field(..., description="the server's address; the engine behind it is recognised (docs/engines.md)")


def _contexts(values: list[Any]) -> list[int]:
    return [parse_context(v) for v in values]


class MatrixConfig(Strict):
    """What to measure, and how."""

    contexts: list[int] = Field(default_factory=lambda: [8192], description="decode-matrix rows (tokens or 8K labels)")
    prefill_contexts: list[int] = Field(default_factory=list, description="prefill-list rows")
    concurrency: list[int] = Field(default_factory=lambda: [1, 2, 4, 8])
    duration_s: float = Field(30.0, gt=0, description="length of each decode cell's measurement window")
    max_output: int = Field(4096, gt=0, description="max_tokens of every decode request")
    api: Literal["completions", "chat"] = "completions"
    prompt_mode: Literal["distinct", "shared"] = "distinct"
    seed: int = 0
    workload: str | None = Field(None, description="the plugin whose make_workload builds the prompts (infermatrix plugins lists them); "
                                 "default: the only one registered (the built-in `workload`)")  # fmt: skip
    warmup: bool = True
    warm_reuse: bool = Field(True, description="skip the warm-up of prompts the engine's KV cache must still hold (docs/metrics.md, Warm-up)")
    warmup_concurrency: int | None = Field(None, gt=0, description="warm-up requests in flight; default: ~32K prompt tokens' worth, at most N")
    ignore_eos: bool = True
    stagger: bool = Field(True, description="shorten each stream's first request so the N streams' ends spread over one generation (docs/metrics.md, Staggered phases)")
    temperature: float = Field(0.0, ge=0, description="sampling temperature of every request; 0 is greedy decoding")
    repeat: int = Field(1, ge=1, description="times each decode cell is measured, interleaved across the matrix (repeat 1 of every "
                        "cell, then repeat 2 ...); K > 1: the cell is the repeats' mean with an interval across them (docs/metrics.md, Repeats)")
    prefill_samples: int = Field(3, ge=1, description="cold probes per prefill point (after one throwaway); the point is their median")
    connect_timeout_s: float = Field(10.0, gt=0)
    idle_timeout_s: float = Field(120.0, gt=0, description="longest silence inside one stream")
    ramp_timeout_s: float = Field(600.0, gt=0, description="longest wait for every stream's first token")
    steady_timeout_s: float = Field(10.0, ge=0, description="longest wait, after that, for the engine to report N running and 0 waiting")
    check_client: bool = Field(True, description="judge whether the client kept up (docs/metrics.md, client verdict); flag cells it could not")
    transport: Literal["auto", "httpx", "raw"] = Field(
        "auto", description="how streams are read: the raw asyncio HTTP/1.1 reader, httpx, or auto: raw unless a proxy, URL credentials or the scheme need httpx (docs/performance.md)",
    )
    client_workers: int = Field(0, ge=0, description="worker processes for cells above client_workers_above streams; 0: sized from the cores")
    client_workers_above: int = Field(256, ge=1, description="cells with more streams than this are spread over worker processes")
    client_nice: int | None = Field(None, ge=-20, le=19, description="the client's nice value while a cell runs (e.g. -10 when the engine shares its cores; needs privilege); unset: unchanged")

    @field_validator("contexts", "prefill_contexts", mode="before")
    @classmethod
    def _parse_contexts(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [s for s in v.split(",") if s.strip()]
        if isinstance(v, list):
            return _contexts(v)
        return v

    @field_validator("concurrency", mode="before")
    @classmethod
    def _parse_concurrency(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [s.strip() for s in v.split(",") if s.strip()]
            try:
                v = [int(s) for s in v]
            except ValueError:
                raise ValueError("must be a list of positive integers") from None
        return v

    @model_validator(mode="after")
    def _check(self) -> MatrixConfig:
        if any(n <= 0 for n in self.concurrency):
            raise ValueError("concurrency levels must be positive integers")
        # An empty matrix is allowed here: a run may be load points, a search or a workload pass alone
        # (registry.validate_config says "nothing to measure" when it is none of them).
        return self


class ClientConfig(Strict):
    """Where the client's streams run (docs/distributed.md): this host (worker processes above
    ``matrix.client_workers_above`` streams), or Ray actors spread over a cluster's hosts."""

    backend: Literal["local", "ray"] = Field("local", description="local: this host; ray: every decode cell's streams on Ray actors (pip install 'infermatrix[ray]')")
    ray_address: str | None = Field(None, description="the Ray cluster to attach to (e.g. ray://head:10001 or head:6379); unset: start or attach a local Ray")
    hosts: int = Field(0, ge=0, description="actors per cell, stream i to actor i mod hosts; 0: one per alive Ray node")
    placement: Literal["spread", "default"] = Field("spread", description="spread: one actor per node where the cluster allows (Ray's SPREAD); default: Ray's own packing")
    actor_cpus: float = Field(1.0, ge=0, description="CPUs each actor reserves (1 with one-CPU nodes puts each on its own node)")
    clock_pings: int = Field(20, ge=1, description="ping exchanges per clock estimate (before and after each cell; the shortest round trip is used)")


class LoopConfig(Strict):
    """Loop detection settings (the ``detect_loop`` hook reads these)."""

    enabled: bool = True
    min_period: int = Field(1, ge=1, description="shortest repeated cycle, in tokens")
    max_period: int = Field(512, ge=1, description="longest repeated cycle, in tokens")
    min_copies: float = Field(4.0, gt=1, description="copies of the cycle at the tail to call it a loop")
    min_span_tokens: int = Field(64, ge=1, description="the repeated tail must cover at least this many tokens")


class ValidityConfig(Strict):
    """When a measured cell's numbers count (stored per cell in ``cells.flags.validity``)."""

    min_window_fraction: float = Field(0.95, ge=0, le=1, description="the window must last this share of duration_s")
    min_output_tokens: int = Field(32, ge=0, description="tokens received inside the window")
    min_active_fraction: float = Field(0.9, ge=0, le=1, description="time-weighted in-flight requests / concurrency")
    max_error_rate: float = Field(0.0, ge=0, le=1, description="failed requests / requests")


class TelemetryConfig(Strict):
    """[telemetry]: what is read while the run measures (docs/telemetry.md). 0 turns a sampler off."""

    engine_interval_s: float = Field(1.0, description="seconds between reads of the engine's metrics page (0: off)")
    gpu_interval_s: float = Field(1.0, description="seconds between NVML reads of every GPU (0: off)")

    @field_validator("engine_interval_s", "gpu_interval_s")
    @classmethod
    def _interval(cls, v: float) -> float:
        if v < 0:
            raise ValueError(f"must be a positive number of seconds, or 0 for off (got {v:g})")
        return v


class StoreConfig(Strict):
    db: str = "infermatrix.duckdb"


class RunConfig(Strict):
    """A run config: every table and its fields, in one place.

    ``engine`` is typed here as the base ``EngineConfig``; the model a config is validated with is this class
    with only that field narrowed to the union of the registered engine kinds (``run_config_model`` in
    core/registry.py, which knows the plugins), so every instance a run sees is one of these."""

    name: str | None = None
    engine: SerializeAsAny[EngineConfig]
    matrix: MatrixConfig = Field(default_factory=MatrixConfig)
    loops: LoopConfig = Field(default_factory=LoopConfig)
    validity: ValidityConfig = Field(default_factory=ValidityConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    hardware: dict[str, Any] = Field(default_factory=dict)
    # [telemetry]: the engine's metrics and the GPUs as time series while the run measures (docs/telemetry.md)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    # [slo]: limits the run is judged by (infermatrix.core.slo.slo_from_table; docs/slo.md)
    slo: dict[str, Any] | None = None
    load: list[AnyLoadConfig] = Field(default_factory=list)
    # [workload]: the chosen workload's parameters (each workload plugin validates its own; docs/workloads.md)
    workload: dict[str, Any] = Field(default_factory=dict)
    # [search]: the highest load that meets an SLO (infermatrix search; docs/load.md)
    search: SearchConfig | None = None
    # [client]: where the streams run, this host or Ray actors (docs/distributed.md)
    client: ClientConfig = Field(default_factory=ClientConfig)

    @field_validator("load", mode="before")
    @classmethod
    def _burst_matrix(cls, v: Any) -> Any:
        return expand_bursts(v)

    @field_validator("hardware")
    @classmethod
    def _kwh_usd(cls, v: dict[str, Any]) -> dict[str, Any]:
        """hardware.kwh_usd: the price of a kWh, counted into the frontier's usd_per_mtok (docs/telemetry.md)."""
        price = v.get("kwh_usd")
        if price is not None and (isinstance(price, bool) or not isinstance(price, (int, float)) or price < 0):
            raise ValueError(f"hardware.kwh_usd must be a price in dollars, 0 or more (got {price!r})")
        return v


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a TOML config file into a dict (validation is separate, so overrides can apply first)."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None


def parse_value(raw: str) -> Any:
    """``--set`` values: TOML syntax when it parses (numbers, booleans, lists), else a plain string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw


def set_path(data: dict[str, Any], key: str, value: Any, label: str) -> None:
    """``data[a][b][c] = value`` for ``key`` ``a.b.c``, tables made on the way (``--set`` and ``sweep --grid``);
    ``label`` names the flag in the error."""
    parts = key.strip().split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{label}: {part} is not a table")
        node = child
    node[parts[-1]] = value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides in place and return ``data``."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. matrix.duration_s=5")
        set_path(data, key, parse_value(raw.strip()), f"--set {item!r}")
    return data
