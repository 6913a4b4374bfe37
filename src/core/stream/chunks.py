"""The per-event work of one streamed completion: parse, count tokens, keep the arrival times.

Every transport (httpx, or the raw asyncio reader) hands this the ``data`` payloads of one network read
together with **one** timestamp taken when that read returned: a burst of N chunks that came in one read
gets N identical times, rather than times smeared by the parsing of the chunks before them.

Hot-path choices (docs/performance.md): orjson on the raw bytes; arrival times as integer nanoseconds in
plain lists, turned into the record's ``(seconds, tokens)`` events once, when the request ends;
``first_token`` is the one value set live (the ramp watches it).

Token counts come from the server's usage deltas when every chunk carries cumulative usage (engines
whose traits declare ``per_chunk_usage``): several tokens may arrive in one chunk under speculative
decoding. Without them each content chunk counts as one token, and the request is marked
``token_source="chunks"``.
"""

from __future__ import annotations

from typing import Any, Callable

import orjson

from infermatrix.core.stream.sse import DONE
from infermatrix.core.types import RequestRecord

__all__ = ["ChunkParser", "chunk_text", "chunk_parts"]

_loads = orjson.loads
_JSONError = orjson.JSONDecodeError


def chunk_text(choice: dict[str, Any]) -> str:
    """Output text of one choice: completions ``text``, chat ``delta.content`` / reasoning fields."""
    reasoning, content = chunk_parts(choice)
    return reasoning + content


def chunk_parts(choice: dict[str, Any]) -> tuple[str, str]:
    """(reasoning, answer) text of one choice. Completions ``text`` is all answer: the API has no reasoning field,
    so a completions stream's first answer token is its first token (docs/metrics.md, TTFO)."""
    if "text" in choice:
        return "", choice.get("text") or ""
    delta = choice.get("delta") or {}
    return delta.get("reasoning_content") or delta.get("reasoning") or "", delta.get("content") or ""


def _dig(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


class ChunkParser:
    """Turns ``(payloads, t_ns)`` batches into one :class:`RequestRecord`; ``close()`` when the stream ends."""

    __slots__ = ("record", "on_tokens", "keep_text", "count_path", "done", "prev_cum", "parts", "chars", "ts", "ns", "offsets", "first_ns")

    def __init__(
        self, record: RequestRecord, on_tokens: Callable[[int], None] | None = None, keep_text: bool = True,
        count_path: tuple[str, ...] = (),
    ):
        self.record = record
        self.on_tokens = on_tokens
        self.keep_text = keep_text
        # Where a chunk carries the cumulative generated-token count when it is not usage.completion_tokens
        # (EngineTraits.per_chunk_usage_path); () or the usual path: usage only.
        self.count_path = count_path if count_path and tuple(count_path) != ("usage", "completion_tokens") else ()
        self.done = False  # [DONE] seen: the rest of the body is read (the connection goes back to the pool) but ignored
        self.prev_cum = 0
        self.parts: list[str] = []
        self.chars = 0
        self.ts: list[int] = []  # arrival, integer ns, one per chunk that carried tokens
        self.ns: list[int] = []  # tokens of that chunk
        self.offsets: list[int] = []
        self.first_ns: int | None = None

    def feed(self, payloads: list[bytes], t_ns: int) -> bool:
        """Take the events of one read, all arrived at ``t_ns``; False when the stream reported an error
        (the record says which): the caller stops reading."""
        rec = self.record
        tokens = 0
        for p in payloads:
            if self.done:
                break
            if p == DONE:
                self.done = True
                continue
            try:
                obj = _loads(p)
            except _JSONError:
                rec.outcome, rec.error = "stream_error", f"unparseable chunk: {p[:200].decode(errors='replace')}"
                return False
            choices = obj.get("choices")
            if not choices and "error" in obj:
                err = obj["error"]
                rec.outcome = "stream_error"
                rec.error = str(err.get("message", err) if isinstance(err, dict) else err)[:500]
                return False
            usage = obj.get("usage")
            cum = None
            if usage:
                cum = usage.get("completion_tokens")
                if usage.get("prompt_tokens") is not None:
                    rec.prompt_tokens = usage["prompt_tokens"]
            if self.count_path and choices:
                found = _dig(obj, self.count_path)
                if isinstance(found, int):
                    cum = found
            if not choices:  # the usage-only closing chunk
                if cum is not None:
                    rec.final_usage_tokens = cum
                details = usage.get("completion_tokens_details") if usage else None
                if isinstance(details, dict) and isinstance(details.get("reasoning_tokens"), int):
                    rec.reasoning_tokens = details["reasoning_tokens"]  # stored per request, and the tasks workload's count
                continue
            if len(choices) == 1:  # the usual shape, without a join
                c0 = choices[0]
                if "text" in c0:
                    text = answer = c0["text"] or ""
                else:
                    reasoning, answer = chunk_parts(c0)
                    text = reasoning + answer
                    if reasoning:
                        rec.reasoning = True
                if c0.get("finish_reason"):
                    rec.finish_reason = c0["finish_reason"]
            else:
                parts = [chunk_parts(c) for c in choices]
                answer = "".join(a for _, a in parts)
                text = "".join(r + a for r, a in parts)
                rec.reasoning = rec.reasoning or any(r for r, _ in parts)
                for c in choices:
                    if c.get("finish_reason"):
                        rec.finish_reason = c["finish_reason"]
            if cum is not None:
                n = cum - self.prev_cum
                if n < 0:  # a usage count that went back: no tokens, and the higher count stays the reference
                    n = 0
                else:
                    self.prev_cum = cum
            else:
                n = 1 if text else 0
                # A chunk without usage on a stream that has it: counted as one token *and* advanced in the
                # usage count, so the next usage delta does not count it a second time.
                self.prev_cum += n
                rec.token_source = "chunks"
            # The first token: visible text, or a chunk the server counts a generated token in although it shows
            # no text yet (a token that decodes to part of a UTF-8 character, or to nothing: docs/metrics.md).
            if self.first_ns is None and (text or (cum is not None and n > 0)):
                self.first_ns = t_ns
                rec.first_token = t_ns / 1e9  # set live: the ramp waits for every stream's first token
            if answer and rec.first_content is None:  # TTFO: the first answer (non-reasoning) text, same read's time
                rec.first_content = t_ns / 1e9
            if text and self.keep_text:
                self.parts.append(text)
                self.chars += len(text)
            if n > 0:
                self.ts.append(t_ns)
                self.ns.append(n)
                self.offsets.append(self.chars)
                tokens += n
        if tokens and self.on_tokens is not None:
            self.on_tokens(tokens)  # once per read, not per chunk: it only feeds the progress display
        return True

    def close(self) -> None:
        """Write the events and text into the record (however the stream ended, cancellation included)."""
        rec = self.record
        rec.events = [(t / 1e9, n) for t, n in zip(self.ts, self.ns)]
        rec.offsets = self.offsets
        rec.text = "".join(self.parts)
