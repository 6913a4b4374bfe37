"""Plain data passed between the runner, the plugins and the store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

from infermatrix.core.tasks.builtin import Task

__all__ = [
    "Capacity",
    "EngineInfo",
    "Prompt",
    "Tokenizer",
    "Workload",
    "WorkloadRequest",
    "Session",
    "SessionWorkload",
    "TaskOutcome",
    "LoopFinding",
    "RequestRecord",
    "OUTCOMES",
    "CELL_STATUSES",
    "PrefillResult",
    "PrefillSample",
    "median_probes",
    "CellResult",
]

# Every request ends in exactly one of these.
OUTCOMES = ("ok", "http_error", "stream_error", "truncated", "idle_timeout", "connect_error", "reset", "cancelled")


@dataclass
class Capacity:
    """What the server can hold at once; ``None`` means unknown (treated as unlimited, and said so)."""

    kv_tokens: int | None
    max_seqs: int | None = None
    source: str = "unknown"
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class EngineInfo:
    """What a ready engine says about itself, stored with the run."""

    engine: str
    model: str
    version: str | None = None
    max_model_len: int | None = None
    launch_command: str | None = None  # always redacted before it gets here
    hardware: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Prompt:
    """One prompt of a known length in tokens, as the server counts them."""

    text: str
    tokens: int
    key: str  # what makes it distinct (stream id, purpose); stored for provenance


class Tokenizer(Protocol):
    """Counts tokens the way the server does."""

    exact: bool  # True when the count comes from the server's own tokenizer

    async def count(self, text: str) -> int: ...


@runtime_checkable
class Workload(Protocol):
    """Builds prompts of an exact token length, distinct per key, deterministic by seed."""

    async def prompt(self, context_tokens: int, key: str, *, distinct: bool | None = None) -> Prompt:
        """``distinct=True`` forces a prompt of its own even in shared mode (cold prefill probes)."""
        ...


@dataclass
class WorkloadRequest:
    """One request of a workload's own traffic (a shared-prefix group's prompt, a conversation's turn).

    ``prompt`` (completions) or ``messages`` (chat) is sent as is. ``shared_tokens``: how many of its prompt
    tokens (as the server counts them) an earlier request of the same pass sent token for token: the reuse
    the workload implies (docs/workloads.md, "Prefix reuse"). ``labels`` name it in the store (``group``,
    ``member``, ``conversation``, ``turn``)."""

    max_tokens: int
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    shared_tokens: int = 0
    think_s: float = 0.0  # wait before sending it (after the session's previous reply)
    labels: dict[str, int] = field(default_factory=dict)
    ignore_eos: bool | None = None  # None: the run's matrix.ignore_eos; a task is sent with False (its natural length)
    task: Task | None = None  # a task with a checkable answer: the runner judges the reply and stores it (tasks)


class Session(Protocol):
    """A workload's sequence of requests, each sent after the previous one ended (a group, a conversation)."""

    async def next(self, reply: str | None, prompt_tokens: int | None) -> WorkloadRequest | None:
        """The next request, given the previous one's streamed reply text and its server-counted prompt
        tokens (both ``None`` before the first, or when it failed); ``None`` ends the session.

        A session may also have ``observe(outcome: TaskOutcome)``: the runner calls it with each judged task of
        the session before asking for the next request (the ``tasks`` workload's auto-stop reads it)."""
        ...


@dataclass
class TaskOutcome:
    """A judged task (a ``WorkloadRequest`` with ``task``): what ``Session.observe`` gets and the store keeps."""

    task: Task
    output_tokens: int | None
    reasoning_tokens: int | None  # the server's usage.completion_tokens_details.reasoning_tokens; None: not reported
    extracted: str | None
    correct: bool
    ok: bool  # the request ended normally (a failed request is stored, not judged right)


@runtime_checkable
class SessionWorkload(Workload, Protocol):
    """A workload with traffic of its own (shared-prefix groups, multi-turn conversations): after the matrix and
    the load points the runner sends each session's requests one after the other, ``concurrency`` sessions side
    by side, and stores them as the run's workload pass (core/run/sessions.py; docs/workloads.md).

    The properties may be plain attributes (a class attribute ``name = "mine"``, ``self.concurrency = 4``)."""

    @property
    def name(self) -> str:
        """Stored as the pass's ``workload`` and shown while it runs."""
        ...

    @property
    def concurrency(self) -> int | None:
        """Sessions in flight at once; ``None``: all of them."""
        ...

    @property
    def block_tokens(self) -> int | None:
        """The KV block the implied reuse is floored to; ``None``: the engine's own, else 16."""
        ...

    async def sessions(self) -> Sequence[Session]:
        """The pass's sessions, built when the pass starts (after the matrix and the load points)."""
        ...

    def describe(self) -> dict[str, Any]:
        """The parameters as run, stored with the pass (``workload_passes.params``)."""
        ...


@dataclass
class LoopFinding:
    """Evidence that a text repeats itself."""

    detector: str
    period_tokens: int
    copies: float
    span_tokens: int
    cycle_hash: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class RequestRecord:
    """One streamed request, as the client saw it. Times are ``time.monotonic()`` seconds."""

    stream_index: int
    seq: int
    sent: float  # when the request was handed to a connection, just before its write (docs/metrics.md, "request sent")
    prompt_tokens: int | None = None
    first_token: float | None = None
    first_content: float | None = None  # the first answer (non-reasoning) token's arrival: TTFO (docs/metrics.md); None: no answer came
    reasoning: bool = False  # a reasoning field (delta.reasoning_content / reasoning) carried text in this stream
    events: list[tuple[float, int]] = field(default_factory=list)  # (arrival, tokens) per chunk with output
    offsets: list[int] = field(default_factory=list)  # len(text) after each event: lets tokens be recounted
    ended: float | None = None
    finish_reason: str | None = None
    outcome: str = "ok"
    error: str | None = None
    text: str = ""
    token_source: str = "usage"  # "usage" (server usage deltas) or "chunks" (one per chunk, reconciled)
    final_usage_tokens: int | None = None  # completion_tokens of the closing usage chunk, if any
    loop: LoopFinding | None = None
    opened: float | None = None  # when the client began the request (before connecting): it is in flight from then
    written: bool = False  # the request was written (from ``sent`` on); False: it never got that far (a pool wait, a refused connect)
    staggered: bool = False  # a stream's first request, shortened so the streams' ends spread out (measure/stagger.py)
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens, when the server reports it

    @property
    def output_tokens(self) -> int:
        return sum(n for _, n in self.events)

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.sent

    @property
    def ttfo_s(self) -> float | None:
        """Time to the first answer token (TTFO), from the send: TTFT when no reasoning came before the answer."""
        return None if self.first_content is None else self.first_content - self.sent


# Cell statuses, as the decode_matrix view shows them.
CELL_STATUSES = ("valid", "looped", "over_capacity", "error", "client_bound", "interrupted", "admission_limited")


@dataclass
class PrefillResult:
    """One cold request, ``max_tokens = 1``."""

    context_tokens: int
    prompt_tokens: int | None
    ttft_ms: float | None
    prompt_tps: float | None
    status: str = "valid"  # valid | client_bound | error | over_capacity | interrupted
    reason: str | None = None
    samples: list[PrefillSample] = field(default_factory=list)  # every probe sent, throwaway first
    engine_counters: dict[str, Any] | None = None  # the engine's counters over the cold probes (measure/engine_stats.py)
    # metric -> infermatrix.core.intervals.Interval (run/prefill.py): ttft_ms and prompt_tps with their 95 % intervals
    intervals: dict[str, Any] = field(default_factory=dict)

    def median_probes(self) -> list[PrefillSample]:
        """The probes ``ttft_ms`` is the median of (:func:`median_probes` for this point's status)."""
        return median_probes(self.samples, self.status)


def median_probes(samples: Sequence[PrefillSample], status: str) -> list[PrefillSample]:
    """The cold probes a prefill point's median is of: for a ``valid`` point the unheld ones (outcome ``ok``); for
    any other (``client_bound``: too many held) every answered one. The one rule run/prefill.py and the store use."""
    return [s for s in samples if not s.throwaway and s.ttft_ms is not None and (status != "valid" or s.outcome == "ok")]


@dataclass
class PrefillSample:
    """One cold probe of a prefill point (``ttft_ms`` of the point is the median of the kept ones)."""

    sample_no: int
    throwaway: bool  # the first probe of a point: may include one-time work (kernel compilation, allocation)
    request_id: str
    prompt_tokens: int | None
    ttft_ms: float | None
    sent: float
    first_token: float | None
    outcome: str


@dataclass
class CellResult:
    """One (context, concurrency) decode cell. Numbers are ``None`` unless measured."""

    context_tokens: int
    concurrency: int
    status: str
    reason: str | None = None
    total_tps: float | None = None
    per_request_tps: float | None = None
    ttft_ms: float | None = None
    tbt_ms: float | None = None
    avg_active: float | None = None
    completed: int | None = None
    output_tokens: int | None = None
    measured_s: float | None = None
    window_start: float | None = None  # monotonic seconds, for reconciliation with server-side truth
    window_end: float | None = None
    # The two TTFT populations of ttft_ms (docs/metrics.md): the opening burst and the restarts.
    ttft_burst_ms: float | None = None
    ttft_burst_n: int | None = None
    ttft_restart_ms: float | None = None
    ttft_restart_n: int | None = None
    token_source: str | None = None
    prompt_tokens: float | None = None  # median prompt length the server reported (stored rounded)
    started_at: float | None = None  # wall-clock epoch seconds
    finished_at: float | None = None
    histograms: dict[str, bytes] = field(default_factory=dict)  # metric -> HDR encoded (microseconds)
    flags: dict[str, Any] = field(default_factory=dict)  # validity and provenance details
    requests: list[RequestRecord] = field(default_factory=list)
    # metric -> infermatrix.core.intervals.Interval (measure/cell_intervals.py): each number's 95 % interval
    intervals: dict[str, Any] = field(default_factory=dict)
