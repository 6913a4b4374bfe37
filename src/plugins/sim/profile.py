"""Sim profiles: what engine to pretend to be. Built-ins live in ``profiles/*.toml``.

A profile reference is a built-in name, a path to a TOML or JSON file whose top-level table is the
profile, or a dict. A file or dict may say ``base = "demo"`` to start from a built-in and change a
few fields (``[engine] profile = {base = "demo", spec_tokens = 2}``).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from infermatrix.plugin import ConfigError, Strict
from infermatrix.plugins.sim.faults import SimFaults

__all__ = ["SimArgs", "with_engine_args", "METRIC_ROLES", "CAPACITY_GAUGES", "LoopProfile", "FrontendTable", "SimProfile", "load_profile", "builtin_profiles", "PROFILE_DIR"]

PROFILE_DIR = Path(__file__).with_name("profiles")

# Metric roles -> the family name after the prefix (vLLM's names; a counter's samples get ``_total``).
METRIC_ROLES: dict[str, str] = {
    "running": "num_requests_running",
    "waiting": "num_requests_waiting",
    "kv_usage": "kv_cache_usage_perc",
    "kv_usage_legacy": "gpu_cache_usage_perc",
    "prompt_tokens": "prompt_tokens",
    "generated_tokens": "generation_tokens",
    "prefix_cache_queries": "prefix_cache_queries",
    "prefix_cache_hits": "prefix_cache_hits",
    "spec_drafts": "spec_decode_num_drafts",
    "spec_draft_tokens": "spec_decode_num_draft_tokens",
    "spec_accepted_tokens": "spec_decode_num_accepted_tokens",
    "spec_accepted_per_pos": "spec_decode_num_accepted_tokens_per_pos",
    "preemptions": "num_preemptions",
    "request_success": "request_success",
    "cache_config": "cache_config_info",
}

# Capacity published as plain gauges (off unless the profile names them): role -> what the gauge holds.
CAPACITY_GAUGES: dict[str, str] = {"kv_tokens": "KV-cache size in tokens", "max_seqs": "most sequences running at once"}


class LoopProfile(Strict):
    """When requests start repeating themselves (like a model that degenerates under load)."""

    min_context: int | None = Field(None, ge=1, description="prompt tokens at or above which loops start; None: never (the [[loop]] marker still works)")
    min_running: int = Field(1, ge=1, description="...and only while at least this many requests are admitted (itself included)")
    after_tokens: int = Field(64, ge=0, description="output tokens before the loop starts")
    period_tokens: int = Field(16, ge=1, description="length of the repeated cycle")


class FrontendTable(Strict):
    """Measured intake delays: ``ms[i][j]`` at ``contexts[i]`` prompt tokens with ``requests[j]`` in the server.

    Linear between rows and between columns, flat beyond the ends of either axis."""

    contexts: list[int] = Field(min_length=1, description="prompt tokens, ascending")
    requests: list[int] = Field(min_length=1, description="requests in the server (itself included), ascending")
    ms: list[list[float]] = Field(description="one row per context, one column per request count")

    @model_validator(mode="after")
    def _check(self) -> FrontendTable:
        for name, axis in (("contexts", self.contexts), ("requests", self.requests)):
            if any(v <= 0 for v in axis) or any(b <= a for a, b in zip(axis, axis[1:])):
                raise ValueError(f"frontend_table.{name} must be positive and strictly ascending")
        if len(self.ms) != len(self.contexts) or any(len(row) != len(self.requests) for row in self.ms):
            raise ValueError("frontend_table.ms needs one row per context with one value per request count")
        if any(v < 0 for row in self.ms for v in row):
            raise ValueError("frontend_table.ms values must be >= 0")
        return self

    def lookup(self, context_tokens: float, requests: float) -> float:
        i0, i1, fi = _bracket(self.contexts, context_tokens)
        j0, j1, fj = _bracket(self.requests, requests)
        ms = self.ms
        lo = ms[i0][j0] + (ms[i0][j1] - ms[i0][j0]) * fj
        hi = ms[i1][j0] + (ms[i1][j1] - ms[i1][j0]) * fj
        return lo + (hi - lo) * fi


def _piecewise(rows: list[tuple[int, float]], x: float) -> float:
    """Linear through ascending ``rows``, continued at the last segment's slope beyond the last row."""
    for (x0, y0), (x1, y1) in zip(rows, rows[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    (x0, y0), (x1, y1) = rows[-2], rows[-1]
    return y1 + (y1 - y0) * (x - x1) / (x1 - x0)


def _bracket(axis: list[int], x: float) -> tuple[int, int, float]:
    """Indices around ``x`` on an ascending axis and the fraction between them (0 beyond the ends)."""
    if x <= axis[0]:
        return 0, 0, 0.0
    if x >= axis[-1]:
        return len(axis) - 1, len(axis) - 1, 0.0
    hi = next(i for i, v in enumerate(axis) if v >= x)
    return hi - 1, hi, (x - axis[hi - 1]) / (axis[hi] - axis[hi - 1])


class SimProfile(Strict):
    name: str = "custom"
    description: str = ""
    model: str = "sim-model"
    max_model_len: int = Field(16384, gt=0)
    # KV cache: num_gpu_blocks x block_size = kv_tokens exactly (checked), as /metrics reports it.
    kv_tokens: int = Field(262_144, gt=0)
    block_size: int = Field(16, gt=0)
    max_num_seqs: int = Field(256, gt=0)
    # Decode step time in ms: step_base_ms + step_per_seq_ms * batch + step_per_1k_ctx_ms * context/1000,
    # where context is the sum of prompt and generated tokens over the batch. ``step_table``
    # ([[batch, ms], ...], interpolated linearly, flat beyond its ends) replaces the first two terms.
    step_base_ms: float = Field(8.0, ge=0)
    step_per_seq_ms: float = Field(0.1, ge=0)
    step_per_1k_ctx_ms: float = Field(0.0, ge=0)
    step_table: list[tuple[int, float]] | None = None
    step_jitter: float = Field(0.0, ge=0, le=2, description="noise on purpose: each decode step's time is multiplied by a "
                               "log-normal factor of mean 1 and this relative sd (0: none), so the long-run rate stays the "
                               "profile's batch / step_ms (tests of intervals, docs/sim.md)")  # fmt: skip
    step_scale: float = Field(1.0, gt=0, description="every decode step takes this many times step_ms (1.05: a sim 5 % slower)")
    # Serial prefill of the part of the prompt the prefix cache doesn't hold.
    prefill_tps: float = Field(20_000.0, gt=0)
    prefill_base_ms: float = Field(2.0, ge=0)
    prefill_cached_tps: float = Field(0.0, ge=0, description="rate of walking the cached part of a prompt; 0: free")
    prefix_cache_tokens: int = Field(1_048_576, ge=0, description="LRU bound of the prefix cache; 0 turns it off")
    record_prompt_blocks: bool = Field(False, description="keep each finished request's prompt block hashes for "
                                       "/debug/truth?blocks=1 (tests of shared prefixes); off: dropped at the end, as memory")  # fmt: skip
    prefill_table: list[tuple[int, float]] | None = Field(None, description="[[new tokens, ms], ...]: measured prefill "
                                                          "time by uncached length, linear between rows, from (0, 0), at the last "
                                                          "row's slope beyond it; replaces prefill_tps and prefill_attn_ms")  # fmt: skip
    prefill_attn_ms: float = Field(0.0, ge=0, description="ms per million causal-attention token pairs a prefill computes "
                                   "(new x cached + new x (new+1)/2): what makes long prompts slower per token")  # fmt: skip
    # Chunked prefill (docs/sim.md, "Chunked prefill"): None keeps prefill serial beside decoding (it never slows a step).
    max_num_batched_tokens: int | None = Field(None, gt=0, description="vLLM's token budget per step: prefills run inside "
                                               "the decode steps, in chunks of what the running decoders leave of it, and "
                                               "each such step takes its chunks' prefill time on top of step_ms")  # fmt: skip
    # Intake (the API server in front of the engine): each request needs frontend_ms(prompt, n) of it before
    # it reaches the scheduler, where n is the number of requests in the server, itself included. The work
    # is shared (processor sharing): while n changes, a request's progress rate changes with it. 0: none.
    frontend_base_ms: float = Field(0.0, ge=0, description="intake time of a request alone in the server")
    frontend_per_1k_ms: float = Field(0.0, ge=0, description="...plus this much per 1000 prompt tokens")
    frontend_load: float = Field(0.0, ge=0, description="each other request in the server stretches intake by this fraction")
    frontend_table: FrontendTable | None = Field(None, description="measured intake delays by (prompt tokens, requests); replaces the three above")
    # Speculative decoding: each step after its first, a sequence drafts spec_tokens tokens and emits 1 + the
    # leading accepted ones. ``acceptance`` is vLLM's acceptance rate (accepted / drafted tokens): draft position
    # i (from 1) is accepted with probability c**i, c chosen so the mean over positions is ``acceptance``
    # (with one draft token, c = acceptance). Counted in the vLLM spec_decode_* counters on /metrics.
    spec_tokens: int = Field(0, ge=0)
    acceptance: float = Field(0.0, ge=0, le=1)
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs the profile stands for: reported as the engine's "
                                      "tensor parallelism (cost and tok/s per GPU, docs/slo.md)")  # fmt: skip
    reasoning_tokens: int = Field(0, ge=0, description="chat: the first this many tokens arrive as delta.reasoning_content")
    eos_probability: float = Field(0.0, ge=0, le=1, description="per-token chance of stopping early (unless ignore_eos)")
    # Tasks and natural length (sim/tasks.py; docs/sim.md): both off by default, so nothing else changes.
    natural_tokens: int | tuple[int, int] | None = Field(None, description="without ignore_eos, a request stops by itself "
                                                         "('stop') after N tokens, or a length drawn from [lo, hi] by its seed")  # fmt: skip
    task_accuracy: float = Field(1.0, ge=0, le=1, description="chance a built-in task prompt is answered right (its last "
                                 "tokens are 'Answer: X'); else a wrong X")  # fmt: skip
    # KV pressure: after a step, while KV usage is above this fraction, the youngest running sequence is
    # preempted (its KV freed, back to the head of the queue, recomputed later), as vLLM does. None: never.
    preempt_kv_usage: float | None = Field(None, gt=0, le=1)
    # Server behaviours, to emulate servers that lack them.
    usage: bool = True
    continuous_usage_stats: bool = True
    usage_gap_every: int = Field(0, ge=0, description="with continuous usage, every k-th output chunk carries none (0: never)")
    metrics: bool = True
    tokenize: bool = Field(True, description="false: no /tokenize endpoint (404), as servers without one (TensorRT-LLM's, hosted APIs)")
    tokenizer_file: str | None = Field(None, description="count tokens with this tokenizer.json (or a model directory holding one; "
                                       "needs the `tokenizers` package) instead of the regex tokenizer")  # fmt: skip
    # The sim's metric families are named as vLLM names them (the prefix ``vllm:`` + vLLM's names); an
    # engine plugin under test can have them served under its own names instead.
    metric_prefix: str = Field("vllm:", description="prefix of every metric family on /metrics")
    metric_names: dict[str, str] = Field(default_factory=dict, description="role -> full family name, replacing "
                                         "prefix + the default name (roles: " + ", ".join(METRIC_ROLES) + ")")  # fmt: skip
    capacity_gauges: dict[str, str] = Field(default_factory=dict, description="publish capacity as plain gauges: "
                                            "kv_tokens and/or max_seqs -> a family name, e.g. {kv_tokens = 'toy:kv_cache_tokens'}")  # fmt: skip
    seed: int = 0
    loop: LoopProfile = Field(default_factory=LoopProfile)
    faults: SimFaults = Field(default_factory=SimFaults, description="what goes wrong, on purpose (faults.py)")
    # Ground truth kept in memory (oldest dropped first); ~16 bytes per emitted chunk per request.
    truth_max_requests: int = Field(20_000, ge=1)
    truth_max_steps: int = Field(500_000, ge=1)

    def acceptance_per_step(self) -> float:
        """c: the chance that a draft token is accepted given the one before it was (see ``acceptance``)."""
        k, a = self.spec_tokens, self.acceptance
        if k <= 1 or a <= 0 or a >= 1:
            return a
        lo, hi = 0.0, 1.0
        for _ in range(60):  # mean over positions of c**i grows with c: bisect
            mid = (lo + hi) / 2
            if sum(mid**i for i in range(1, k + 1)) / k < a:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    def metric_family(self, role: str) -> str:
        """The name the sim serves the ``role`` metric family under (see ``METRIC_ROLES``)."""
        return self.metric_names.get(role) or self.metric_prefix + METRIC_ROLES[role]

    @model_validator(mode="after")
    def _check(self) -> SimProfile:
        unknown = sorted(set(self.metric_names) - set(METRIC_ROLES))
        if unknown:
            raise ValueError(f"metric_names: unknown role {unknown[0]!r} (roles: {', '.join(METRIC_ROLES)})")
        unknown = sorted(set(self.capacity_gauges) - set(CAPACITY_GAUGES))
        if unknown:
            raise ValueError(f"capacity_gauges: unknown role {unknown[0]!r} (roles: {', '.join(CAPACITY_GAUGES)})")
        nat = self.natural_tokens
        if nat is not None and (nat < 1 if isinstance(nat, int) else not 1 <= nat[0] <= nat[1]):
            raise ValueError("natural_tokens: a positive token count or [lo, hi] with 1 <= lo <= hi")
        if self.kv_tokens % self.block_size:
            raise ValueError(f"kv_tokens ({self.kv_tokens}) must be a multiple of block_size ({self.block_size})")
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < self.max_num_seqs:
            # vLLM's own check: every running sequence must fit one step's budget
            raise ValueError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least max_num_seqs ({self.max_num_seqs})")
        if self.kv_tokens < self.max_model_len:
            raise ValueError("kv_tokens must hold at least one max_model_len request (vLLM refuses to start otherwise)")
        if self.step_table is not None:
            if not self.step_table or any(b <= 0 or ms < 0 for b, ms in self.step_table):
                raise ValueError("step_table needs [batch > 0, ms >= 0] rows")
            self.__dict__["step_table"] = sorted(self.step_table)  # bypass validate_assignment recursion
        if self.prefill_table is not None:
            rows = sorted(self.prefill_table)
            if not rows or any(t <= 0 or ms < 0 for t, ms in rows) or any(b[1] < a[1] or b[0] == a[0] for a, b in zip(rows, rows[1:])):
                raise ValueError("prefill_table needs [tokens > 0, ms >= 0] rows, distinct tokens, ms not falling")
            self.__dict__["prefill_table"] = rows
        return self

    @property
    def has_frontend(self) -> bool:
        return self.frontend_table is not None or self.frontend_base_ms > 0 or self.frontend_per_1k_ms > 0

    def frontend_ms(self, prompt_tokens: int, requests: int) -> float:
        """Intake time of a request of ``prompt_tokens`` while ``requests`` are in the server (constant load)."""
        if self.frontend_table is not None:
            return self.frontend_table.lookup(prompt_tokens, requests)
        ms = self.frontend_base_ms + self.frontend_per_1k_ms * prompt_tokens / 1000.0
        return ms * (1.0 + self.frontend_load * max(0, requests - 1))

    def prefill_ms(self, prompt_tokens: int, cached_tokens: int) -> float:
        """Modelled duration of one (serial) prefill of the prompt's uncached part."""
        new = prompt_tokens - cached_tokens
        ms = self.prefill_base_ms
        if self.prefill_table is not None:
            ms += _piecewise([(0, 0.0), *self.prefill_table], new)
        else:
            ms += 1000.0 * new / self.prefill_tps
            if self.prefill_attn_ms:
                ms += self.prefill_attn_ms * (new * cached_tokens + new * (new + 1) / 2) / 1e6
        if self.prefill_cached_tps:
            ms += 1000.0 * cached_tokens / self.prefill_cached_tps
        return ms

    def prefill_chunk_ms(self, done: int, n: int, cached_tokens: int) -> float:
        """Modelled time of one chunk: ``n`` new tokens after ``done`` already computed, of a prompt whose first
        ``cached_tokens`` the prefix cache held. The marginal cost of those tokens in ``prefill_ms`` plus
        ``prefill_base_ms`` per chunk (the first chunk also walks the cached part): one chunk of the whole prompt
        takes ``prefill_ms`` exactly; k chunks take it plus (k - 1) x ``prefill_base_ms``."""
        c = cached_tokens
        marginal = self.prefill_ms(c + done + n, c) - self.prefill_ms(c + done, c)
        return marginal + (self.prefill_ms(c, c) if done == 0 else self.prefill_base_ms)

    @property
    def num_gpu_blocks(self) -> int:
        return self.kv_tokens // self.block_size

    def step_ms(self, batch: int, context_tokens: int) -> float:
        """Modelled duration of one decode step."""
        table = self.step_table
        if table is None:
            ms = self.step_base_ms + self.step_per_seq_ms * batch
        elif batch <= table[0][0]:
            ms = table[0][1]
        elif batch >= table[-1][0]:
            ms = table[-1][1]
        else:
            ms = table[-1][1]
            for (b0, m0), (b1, m1) in zip(table, table[1:]):
                if batch <= b1:
                    ms = m0 + (m1 - m0) * (batch - b0) / (b1 - b0)
                    break
        return (ms + self.step_per_1k_ctx_ms * context_tokens / 1000.0) * self.step_scale


def builtin_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def _read_file(path: Path) -> dict[str, Any]:
    try:
        if path.suffix == ".json":
            data = json.loads(path.read_text())
        else:
            with path.open("rb") as fh:
                data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"sim profile {path}: cannot read: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"sim profile {path}: not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"sim profile {path}: the top level must be a table")
    data.setdefault("name", path.stem)
    return data


def _resolve(ref: str | dict[str, Any] | SimProfile, depth: int = 0) -> dict[str, Any]:
    if depth > 4:
        raise ConfigError("sim profile: 'base' chain too deep")
    if isinstance(ref, SimProfile):
        return ref.model_dump(mode="json")
    if isinstance(ref, dict):
        data = dict(ref)
    else:
        ref = str(ref)
        if ref in builtin_profiles():
            data = _read_file(PROFILE_DIR / f"{ref}.toml")
        elif ref.endswith((".toml", ".json")) or "/" in ref or Path(ref).is_file():
            data = _read_file(Path(ref).expanduser())
        else:
            raise ConfigError(f"unknown sim profile {ref!r} (known: {', '.join(builtin_profiles())}; or give a .toml/.json path)")
    base = data.pop("base", None)
    if base is not None:
        merged = _resolve(base, depth + 1)
        if isinstance(merged.get("loop"), dict) and isinstance(data.get("loop"), dict):
            data["loop"] = {**merged["loop"], **data["loop"]}
        name = data.pop("name", None)
        merged.update(data)
        merged["name"] = name or f"{merged.get('name', base)}+custom"
        data = merged
    return data


def load_profile(ref: str | dict[str, Any] | SimProfile) -> SimProfile:
    """A validated profile from a built-in name, a TOML/JSON path, or a dict."""
    data = _resolve(ref)
    try:
        return SimProfile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "profile"
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise ConfigError(f"sim profile {data.get('name', '?')!r}: {loc}: {msg}{more}") from None


class SimArgs(Strict):
    """``[engine.args]`` of the sim: vLLM's flag names for what the sim models (docs/sim.md, "Engine args"), each
    replacing its profile's value, so a sweep over them is answered by the sim's own model (docs/tuning.md).
    They reach the server as vLLM's flags on its command line; the server checks the result and refuses to start,
    as vLLM does, when it cannot run it (a KV cache smaller than one max_model_len request)."""

    max_num_seqs: int | None = Field(None, gt=0, description="the batch cap: more streams wait (profile max_num_seqs)")
    block_size: int | None = Field(None, gt=0, description="KV block size in tokens (profile block_size)")
    num_gpu_blocks_override: int | None = Field(None, gt=0, description="KV blocks: kv_tokens = this x block_size")
    speculative_config: dict[str, Any] | None = Field(None, description="{num_speculative_tokens = K}: draft tokens per "
                                                      "step (profile spec_tokens; acceptance stays the profile's)")  # fmt: skip
    max_num_batched_tokens: int | None = Field(None, gt=0, description="the step's token budget: chunked prefill inside "
                                               "the decode steps (profile max_num_batched_tokens; docs/sim.md)")  # fmt: skip

    @model_validator(mode="after")
    def _check(self) -> SimArgs:
        spec = self.speculative_config
        if spec is not None:
            k = spec.get("num_speculative_tokens")
            if set(spec) - {"num_speculative_tokens", "method"} or not isinstance(k, int) or isinstance(k, bool) or k < 0:
                raise ValueError("speculative_config: the sim models {num_speculative_tokens = K} (K >= 0; method is accepted, not modelled)")
        return self


def with_engine_args(profile: SimProfile, args: SimArgs, check: bool = True) -> SimProfile:
    """``profile`` with ``args`` in place of its own values; ``check``: validated (ConfigError when the result cannot
    run), else copied as it is (planning before launch only reads its capacity)."""
    update: dict[str, Any] = {}
    if args.max_num_seqs is not None:
        update["max_num_seqs"] = args.max_num_seqs
    block = args.block_size or profile.block_size
    if args.block_size is not None or args.num_gpu_blocks_override is not None:
        blocks = args.num_gpu_blocks_override or profile.kv_tokens // block  # vLLM's memory stays: fewer, larger blocks
        update.update(block_size=block, kv_tokens=blocks * block)
    if args.max_num_batched_tokens is not None:
        update["max_num_batched_tokens"] = args.max_num_batched_tokens
    if args.speculative_config is not None:
        update["spec_tokens"] = args.speculative_config["num_speculative_tokens"]
    if not update:
        return profile
    if not check:
        return profile.model_copy(update=update)
    try:
        return SimProfile.model_validate({**profile.model_dump(), **update})
    except ValidationError as exc:
        err = exc.errors()[0]
        kv = update.get("kv_tokens", profile.kv_tokens)
        raise ConfigError(f"engine args: {err['msg'].removeprefix('Value error, ')} (KV cache {kv} tokens, "
                          f"max_model_len {profile.max_model_len})") from None
