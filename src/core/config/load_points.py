"""The ``[[load]]`` points and ``[search]``: an open-loop rate point, a trace replay, a burst (and the burst matrix a
table of lists expands to), an interference point, and the discriminated union a ``[[load]]`` table is read as
(docs/load.md). Each point's run lives in core/load/; this module only parses and checks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from infermatrix.core.config.base import ArrivalText, ContextTokens, Strict

__all__ = [
    "LoadConfig",
    "SearchConfig",
    "TraceLoadConfig",
    "BurstLoadConfig",
    "BURST_AXES",
    "expand_bursts",
    "MixedLoadConfig",
    "LOAD_TAGS",
    "AnyLoadConfig",
]


class LoadConfig(Strict):
    """One open-loop point (``[[load]]``, or ``--rate``): requests arriving at ``rate`` per second (docs/load.md)."""

    rate: float = Field(..., gt=0, description="requests per second")
    arrival: ArrivalText = Field("poisson", description="poisson, constant or gamma:K (K < 1 burstier than Poisson)")
    duration_s: float = Field(30.0, gt=0, description="the span the arrivals are drawn over")
    context: ContextTokens = Field(None, description="prompt tokens of every request (8K labels work); default: the first matrix context, else 1024")
    max_output: int = Field(256, gt=0, description="max_tokens of every request; default: run --max-output when given, else 256 (docs/load.md)")
    max_in_flight: int | None = Field(None, gt=0, description="cap on requests in flight: the rest wait in a queue, their latency still counted from the scheduled time")
    seed: int | None = Field(None, description="seed of the arrival schedule; default matrix.seed + the point's index")


class SearchConfig(Strict):
    """``[search]`` (or ``infermatrix search``): the highest load that meets an SLO (docs/load.md, "Search")."""

    slo: str = Field(..., description="the SLO every probe is judged by: KEY=VALUE limits or a preset (docs/slo.md)")
    over: Literal["rate", "concurrency"] = Field("rate", description="rate: open-loop points; concurrency: decode cells")
    context: ContextTokens = Field(None, description="prompt tokens of every probe (8K labels work); default: the first matrix context")
    start: float | None = Field(None, gt=0, description="the first load probed; default: rate — the request rate one "
                                "closed-loop stream achieves (a measured N = 1 cell); concurrency — 1")  # fmt: skip
    resolution: str | None = Field(None, description="how narrow the answer's interval must be: absolute (0.5) or relative "
                                   "to the highest passing load (10%); default 10% for rate, 1 for concurrency")  # fmt: skip
    max: float | None = Field(None, gt=0, description="the highest load probed (doubling stops there)")
    arrival: ArrivalText = Field("poisson", description="rate probes: poisson, constant or gamma:K")
    duration_s: float | None = Field(None, gt=0, description="rate probes: the span each probe's arrivals are drawn over; default matrix.duration_s")
    max_in_flight: int | None = Field(None, gt=0, description="rate probes: cap on requests in flight (docs/load.md)")
    client_retries: int = Field(1, ge=0, le=10, description="a probe the client could not deliver (client_bound) is measured "
                                "again up to this many times before it stops the search")  # fmt: skip

    @model_validator(mode="after")
    def _check(self) -> SearchConfig:
        # The SLO and the resolution are parsed by core/slo (which imports this module): checked before the run
        # starts, by check_search (core/load/search.py), so a mistake is still one line.
        if self.over == "concurrency" and self.start is not None and self.start != int(self.start):
            raise ValueError(f"start = {self.start:g}: a concurrency search starts at a whole number of requests")
        return self


class TraceLoadConfig(Strict):
    """One trace-replay point (``[[load]] kind = "trace"``, or ``--trace FILE``): a trace file's requests sent at
    their timestamps × ``time_scale``, with their own lengths (docs/load.md, docs/workloads.md)."""

    kind: Literal["trace"] = "trace"
    arrival: Literal["trace"] = "trace"
    path: str = Field(..., description="the trace file (Mooncake JSONL, Azure CSV, BurstGPT CSV)")
    format: Literal["mooncake", "azure", "burstgpt"] | None = Field(None, description="default: from the file (.jsonl: mooncake; the CSV header)")
    time_scale: float = Field(1.0, gt=0, description="every timestamp is multiplied by it: 0.5 replays twice as fast")
    block_tokens: int = Field(512, gt=0, description="tokens per Mooncake hash_id block")
    max_requests: int | None = Field(None, gt=0, description="replay only the first N requests (after skipped ones)")
    max_duration_s: float | None = Field(None, gt=0, description="replay only the requests whose scaled time is below this")
    max_in_flight: int | None = Field(None, gt=0, description="cap on requests in flight, as for a rate point")
    seed: int | None = Field(None, description="seed of the prompts' token blocks; default matrix.seed")

    @field_validator("path")
    @classmethod
    def _absolute(cls, v: str) -> str:
        return str(Path(v).expanduser().resolve())  # stored with the run: resume finds it from any directory


class BurstLoadConfig(Strict):
    """One burst point (``[[load]] kind = "burst"``, or ``--burst REQUESTS@CONCURRENCY``): a fixed number of requests,
    at most ``concurrency`` in flight, timed from the first request sent to the last one's end (docs/load.md, "Bursts")."""

    kind: Literal["burst"] = "burst"
    requests: int = Field(..., gt=0, description="requests in the burst (a list: one point per value)")
    concurrency: int | None = Field(None, gt=0, description="cap on requests in flight (a list: one point per value); default: all at once")
    context: ContextTokens = Field(None, description="prompt tokens of every request (8K labels; a list: one point per value); "
                                   "default: the first matrix context, else 1024")  # fmt: skip
    max_output: int = Field(256, gt=0, description="max_tokens of every request; default: run --max-output when given, else 256")
    natural_stop: bool = Field(False, description="let each request stop at its end-of-sequence token (no ignore_eos): its own length, not max_output")

    @property
    def in_flight(self) -> int:
        """The cap on requests in flight: ``concurrency``, or every request at once."""
        return min(self.concurrency or self.requests, self.requests)


BURST_AXES = ("requests", "concurrency", "context")  # a burst table's fields that may be lists: the burst matrix


def expand_bursts(points: Any) -> Any:
    """``[[load]]`` tables with ``kind = "burst"`` whose ``requests``, ``concurrency`` or ``context`` are lists become one
    point per combination (requests × concurrency × context, in that nesting order): the burst matrix."""
    if not isinstance(points, list):
        return points
    out: list[Any] = []
    for p in points:
        if not (isinstance(p, dict) and p.get("kind") == "burst" and any(isinstance(p.get(k), list) for k in BURST_AXES)):
            out.append(p)
            continue
        combos: list[dict[str, Any]] = [dict(p)]
        for axis in BURST_AXES:
            values = p.get(axis)
            if isinstance(values, list):
                if not values:
                    raise ValueError(f"burst {axis}: an empty list")
                combos = [{**c, axis: v} for c in combos for v in values]
        out += combos
    return out


class MixedLoadConfig(Strict):
    """One interference point (``[[load]] kind = "mixed"``, or ``--mixed STREAMS@DECODE_CTX+PREFILL_CTX``):
    ``decode_streams`` long decodes running, then long prompts sent into them; each decoder's token gaps while a
    prompt is in the engine against its gaps without one (docs/load.md, "Interference")."""

    kind: Literal["mixed"] = "mixed"
    decode_streams: int = Field(..., gt=0, description="decode streams running through the whole point")
    decode_context: ContextTokens = Field(None, description="prompt tokens of each decode stream (8K labels); default: "
                                          "the first matrix context, else 1024")  # fmt: skip
    prefill_context: ContextTokens = Field(..., description="prompt tokens of each prefill sent into the decodes (8K labels)")
    prefills: int = Field(3, gt=0, description="prefills sent during the point (each a distinct, uncached prompt)")
    prefill_rate: float | None = Field(None, gt=0, description="prefills per second (constant spacing, they may overlap); "
                                       "default: one at a time, each sent gap_s after the previous one's first token")  # fmt: skip
    gap_s: float = Field(0.25, ge=0, description="one at a time: quiet time after a prefill's first token before the next")
    prefill_max_output: int = Field(1, gt=0, description="max_tokens of each prefill (1: it leaves the engine at its first token)")
    decode_max_output: int | None = Field(None, gt=0, description="max_tokens of each decode stream (ignore_eos): it must "
                                          "outlast the point; the streams are closed when the point ends. Default: 4096, "
                                          "or what max_model_len leaves after decode_context when that is less")  # fmt: skip
    warmup_s: float = Field(1.0, ge=0, description="after every decode stream's first token, before the alone window")
    window_s: float = Field(2.0, gt=0, description="the alone window: the decoders' gaps with no prefill in the engine")

    @model_validator(mode="after")
    def _check(self) -> MixedLoadConfig:
        if self.prefill_context is None:
            raise ValueError("prefill_context: give the prefills' prompt tokens (e.g. 8K)")
        return self

    def decode_tokens(self, decode_context: int, max_model_len: int | None) -> int:
        """Each decode stream's max_tokens: ``decode_max_output``, else 4096 or what ``max_model_len`` leaves (at least 1)."""
        if self.decode_max_output is not None:
            return self.decode_max_output
        return max(1, min(4096, max_model_len - decode_context)) if max_model_len is not None else 4096

    def kv_need(self, decode_context: int, max_model_len: int | None) -> int:
        """KV tokens the point holds at most: every decode stream at full length and the prefills that can overlap
        (one at a time: one; at a rate: all of them)."""
        at_once = self.prefills if self.prefill_rate is not None else 1
        decode = self.decode_streams * (decode_context + self.decode_tokens(decode_context, max_model_len))
        return decode + at_once * (self.prefill_context + self.prefill_max_output)  # type: ignore[operator]


def _load_kind(v: Any) -> str:
    if isinstance(v, dict):
        if v.get("kind") == "burst":
            return "burst_point"
        if v.get("kind") == "mixed":
            return "mixed_point"
        return "trace_point" if v.get("kind") == "trace" or v.get("arrival") == "trace" else "rate_point"
    if isinstance(v, MixedLoadConfig):
        return "mixed_point"
    return "trace_point" if isinstance(v, TraceLoadConfig) else "burst_point" if isinstance(v, BurstLoadConfig) else "rate_point"


# A ``[[load]]`` point: a rate point, a trace replay (``kind = "trace"`` or ``arrival = "trace"``), a burst (``kind = "burst"``)
# or an interference point (``kind = "mixed"``).
LOAD_TAGS = ("rate_point", "trace_point", "burst_point", "mixed_point")  # union tags pydantic puts in an error's location; validate_config drops them
AnyLoadConfig = Annotated[
    Union[Annotated[LoadConfig, Tag("rate_point")], Annotated[TraceLoadConfig, Tag("trace_point")], Annotated[BurstLoadConfig, Tag("burst_point")],
          Annotated[MixedLoadConfig, Tag("mixed_point")]],
    Discriminator(_load_kind),
]
