"""What the runner may ask of an engine, declared by its plugin instead of guessed from names.

Every engine class carries an :class:`EngineTraits` (class attribute or property ``traits``). The core
reads metric names, endpoint paths and request-body extensions from it and from nowhere else, so no
engine vendor is named inside ``infermatrix.core``. The default traits are those of a plain
OpenAI-compatible server: standard request fields plus ``stream_options.include_usage``, no metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping

__all__ = [
    "MetricNames",
    "Gauges",
    "TokenizeAPI",
    "HttpCall",
    "error_text",
    "EngineTraits",
    "PER_CHUNK_USAGE_FIELDS",
    "IGNORE_EOS_FIELDS",
    "merge_body",
]

# The body fields most OpenAI-compatible engines that offer these features accept for them.
# Used only when an engine's traits say it supports the feature; an engine with other names sets
# ``per_chunk_usage_fields`` / ``ignore_eos_fields``.
PER_CHUNK_USAGE_FIELDS: Mapping[str, Any] = {"stream_options": {"continuous_usage_stats": True}}
IGNORE_EOS_FIELDS: Mapping[str, Any] = {"ignore_eos": True}


@dataclass
class Gauges:
    """One read of the engine's metrics; ``None`` where the engine does not report a value."""

    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    generated_tokens: float | None = None
    prompt_tokens: float | None = None
    preemptions: float | None = None
    spec_draft_tokens: float | None = None
    spec_accepted_tokens: float | None = None
    spec_drafts: float | None = None
    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    spec_accepted_per_pos: dict[int, float] | None = None  # draft position (0 first) -> accepted tokens there

    @property
    def generation_tokens(self) -> float | None:  # the older name, kept for callers written before it
        return self.generated_tokens

    def empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))


GAUGE_FIELDS = tuple(f.name for f in fields(Gauges))


@dataclass(frozen=True)
class MetricNames:
    """Where the engine's own counts are, as Prometheus sample names (summed over label sets).

    ``None`` means the engine has no such value. ``running`` and ``waiting`` are what steady-state
    detection and admission limits need; ``generated_tokens`` (a counter) is the engine side of token
    reconciliation. An engine whose metrics are not Prometheus text gives ``parse``: page -> Gauges.
    """

    running: str | None = None  # requests running now (gauge)
    waiting: str | None = None  # requests queued, not yet running (gauge)
    kv_usage: str | None = None  # KV-cache usage, 0..1 (gauge)
    generated_tokens: str | None = None  # generated tokens (counter)
    prompt_tokens: str | None = None  # prompt tokens processed (counter)
    preemptions: str | None = None  # preemptions (counter)
    spec_draft_tokens: str | None = None  # speculative draft tokens proposed (counter)
    spec_accepted_tokens: str | None = None  # speculative draft tokens accepted (counter)
    spec_drafts: str | None = None  # speculative drafts proposed, one per sequence and step (counter)
    prefix_cache_queries: str | None = None  # prompt tokens looked up in the prefix cache (counter)
    prefix_cache_hits: str | None = None  # ...of which found there (counter)
    spec_accepted_per_pos: str | None = None  # accepted draft tokens by draft position (counter, label ``position``)
    path: str = "/metrics"
    parse: Callable[[str], Gauges] | None = None
    # The token counters (generated, prompt, speculative) move when a request ends, not token by token:
    # a window's edges cut requests, so reads inside a run say nothing about a window. They are then not
    # read at all (parse_gauges leaves them None): no per-cell reconciliation or rate check against them.
    counted_at_request_end: bool = False

    def names(self) -> dict[str, str]:
        """Gauge field -> metric name, for the values this engine reports."""
        return {f: getattr(self, f) for f in GAUGE_FIELDS if getattr(self, f)}


@dataclass(frozen=True)
class TokenizeAPI:
    """A token-counting endpoint: ``POST path`` with ``{text_field: text}`` (plus ``model`` when
    ``send_model``), answering ``{"count": n}`` or ``{count_field: n}`` or ``{tokens_field: [...]}``.

    ``chat``: it also accepts ``{"messages": [...], "add_generation_prompt": true}`` and applies the
    chat template (needed to count chat-API prompts). ``special_tokens_field``: the boolean that
    turns special tokens off when counting generated text (``None``: the endpoint has none).
    """

    path: str = "/tokenize"
    text_field: str = "prompt"
    send_model: bool = True
    chat: bool = True
    special_tokens_field: str | None = "add_special_tokens"
    count_field: str = "count"
    tokens_field: str = "tokens"

    def text_body(self, model: str, text: str, *, special_tokens: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {self.text_field: text}
        if self.send_model:
            body["model"] = model
        if not special_tokens and self.special_tokens_field:
            body[self.special_tokens_field] = False
        return body

    def chat_body(self, model: str, text: str) -> dict[str, Any]:
        body: dict[str, Any] = {"messages": [{"role": "user", "content": text}], "add_generation_prompt": True}
        if self.send_model:
            body["model"] = model
        return body

    def read_count(self, data: Any) -> int:
        if isinstance(data, dict):
            if self.count_field in data:
                return int(data[self.count_field])
            return len(data[self.tokens_field])
        if isinstance(data, list):  # a bare token list
            return len(data)
        raise ValueError(f"unexpected tokenize answer: {str(data)[:100]}")


@dataclass(frozen=True)
class HttpCall:
    """An HTTP request the engine answers (``{request_id}`` in ``path`` is filled in where it applies)."""

    method: str
    path: str
    body: Mapping[str, Any] | None = None

    def failed(self, exc: BaseException) -> str:
        """The note for this call when the engine answered nothing (``POST /abort_request failed: ReadError: …``):
        the runner's own declared calls and a plugin's override of them word it alike."""
        return f"{self.method} {self.path} failed: {error_text(exc)}"


def error_text(exc: BaseException) -> str:
    """An exception in one line: its type, and its message where it has one (httpx's often have none)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True)
class EngineTraits:
    """What an engine offers beyond the standard OpenAI API, and where."""

    metrics: MetricNames | None = None  # None: no gauges (the run header and report say so)
    tokenize: TokenizeAPI | None = None  # None: prompts are counted by the server's usage.prompt_tokens
    version_path: str | None = None  # GET -> {"version": ...}
    per_chunk_usage: bool = False  # every chunk may carry cumulative usage, when asked with per_chunk_usage_fields
    per_chunk_usage_fields: Mapping[str, Any] = field(default_factory=lambda: dict(PER_CHUNK_USAGE_FIELDS))
    # Where in a chunk that cumulative generated-token count is (keys, outermost first); the final
    # usage-only chunk is read at usage.completion_tokens whatever this says.
    per_chunk_usage_path: tuple[str, ...] = ("usage", "completion_tokens")
    ignore_eos: bool = False  # the server can be asked to ignore EOS (matrix.ignore_eos), with ignore_eos_fields
    ignore_eos_fields: Mapping[str, Any] = field(default_factory=lambda: dict(IGNORE_EOS_FIELDS))
    body_extras: Mapping[str, Any] = field(default_factory=dict)  # further fields every streaming request carries
    reasoning_fields: tuple[str, ...] = ("reasoning_content", "reasoning")  # delta fields holding reasoning text
    prefix_cache_reset: HttpCall | None = None
    abort: HttpCall | None = None

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary, stored with the run."""
        m = self.metrics
        return {
            "metrics": None if m is None else {
                "path": m.path, **m.names(), **({"parse": True} if m.parse else {}),
                **({"counted_at_request_end": True} if m.counted_at_request_end else {}),
            },
            "tokenize": None if self.tokenize is None else self.tokenize.path,
            "per_chunk_usage": self.per_chunk_usage,
            "ignore_eos": self.ignore_eos,
        }


def merge_body(body: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` merged into ``body`` in place, nested tables merged key by key."""
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(body.get(key), dict):
            merge_body(body[key], value)
        else:
            body[key] = merge_body({}, value) if isinstance(value, Mapping) else value
    return body
