"""One streamed OpenAI-API request, timed as the client sees it.

Token counts come from the server's usage deltas when every chunk carries cumulative usage (engines
whose traits declare ``per_chunk_usage``): several tokens may arrive in one chunk under speculative decoding.
Without them each content chunk counts as one token, and the request is marked ``token_source="chunks"``.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import anyio
import httpx
import orjson

from infermatrix.core.engine.traits import EngineTraits, merge_body
from infermatrix.core.types import RequestRecord

__all__ = ["request_body", "stream_request", "endpoint_path", "classify_error"]

_PLAIN = EngineTraits()  # a plain OpenAI-compatible server


def endpoint_path(api: str) -> str:
    return "/v1/chat/completions" if api == "chat" else "/v1/completions"


def request_body(
    api: str, model: str, prompt: str, max_tokens: int, *, ignore_eos: bool = True, traits: EngineTraits | None = None
) -> dict[str, Any]:
    """A streaming request: standard OpenAI fields plus ``stream_options.include_usage``, and what
    the engine's ``traits`` say it accepts (per-chunk usage, ignore EOS, further extras)."""
    t = traits or _PLAIN
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
    }
    if t.per_chunk_usage:
        merge_body(body, t.per_chunk_usage_fields)
    if ignore_eos and t.ignore_eos:
        merge_body(body, t.ignore_eos_fields)
    if t.body_extras:
        merge_body(body, t.body_extras)
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def _chunk_text(choice: dict[str, Any]) -> str:
    """Output text of one choice: completions ``text``, chat ``delta.content`` / reasoning fields."""
    if "text" in choice:
        return choice.get("text") or ""
    delta = choice.get("delta") or {}
    return (delta.get("reasoning_content") or delta.get("reasoning") or "") + (delta.get("content") or "")


def classify_error(exc: BaseException) -> str:
    """Map a transport exception to a request outcome."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return "connect_error"
    if isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout | httpx.PoolTimeout):
        return "idle_timeout"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "truncated"
    if isinstance(exc, httpx.ReadError | httpx.WriteError | ConnectionError):
        return "reset"
    return "stream_error"


async def stream_request(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    record: RequestRecord,
    *,
    headers: dict[str, str] | None = None,
    on_tokens: Callable[[int], None] | None = None,
    keep_text: bool = True,
    read_usage: Callable[[Any], tuple[int | None, int | None]] | None = None,
) -> RequestRecord:
    """Send ``body`` to ``url``, stream the answer into ``record``; never raises for server faults.

    ``read_usage``: (generated so far, prompt tokens) from a chunk whose counts are not in ``usage``
    (``EngineTraits.per_chunk_usage_read``).
    Cancellation (the window closing) marks the request ``cancelled`` and re-raises.
    """
    record.sent = time.monotonic()
    prev_cum = 0
    saw_done = False
    parts: list[str] = []
    chars = 0
    try:
        async with client.stream("POST", url, json=body, headers=headers) as resp:
            if resp.status_code >= 400:
                raw = await resp.aread()
                record.outcome = "http_error"
                record.error = f"HTTP {resp.status_code}: {raw[:500].decode(errors='replace')}"
                return record
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    saw_done = True
                    break
                now = time.monotonic()
                try:
                    obj = orjson.loads(data)
                except orjson.JSONDecodeError:
                    record.outcome, record.error = "stream_error", f"unparseable chunk: {data[:200]}"
                    return record
                if "error" in obj and not obj.get("choices"):
                    err = obj["error"]
                    record.outcome = "stream_error"
                    record.error = str(err.get("message", err) if isinstance(err, dict) else err)[:500]
                    return record
                usage = obj.get("usage") or None
                cum, prompt_tokens = read_usage(obj) if read_usage is not None else (None, None)
                if cum is None and usage:
                    cum = usage.get("completion_tokens")
                if prompt_tokens is None and usage:
                    prompt_tokens = usage.get("prompt_tokens")
                if prompt_tokens is not None:
                    record.prompt_tokens = prompt_tokens
                choices = obj.get("choices") or []
                text = "".join(_chunk_text(c) for c in choices)
                if cum is not None and choices:
                    n = cum - prev_cum
                    prev_cum = cum
                elif choices:
                    n = 1 if text else 0
                    if text:  # a chunk with no text (a chat role delta) carries no token either way
                        record.token_source = "chunks"
                else:  # usage-only closing chunk
                    if cum is not None:
                        record.final_usage_tokens = cum
                    n = 0
                if n > 0 or text:
                    if record.first_token is None and text:
                        record.first_token = now
                    if keep_text:
                        parts.append(text)
                        chars += len(text)
                    if n > 0:
                        record.events.append((now, n))
                        record.offsets.append(chars)
                        if on_tokens is not None:
                            on_tokens(n)
                for c in choices:
                    if c.get("finish_reason"):
                        record.finish_reason = c["finish_reason"]
        if not saw_done and record.finish_reason is None:
            record.outcome, record.error = "truncated", "stream ended before [DONE]"
    except anyio.get_cancelled_exc_class():
        record.outcome = "cancelled" if record.finish_reason is None else record.outcome
        raise
    except (httpx.HTTPError, ConnectionError) as exc:
        record.outcome = classify_error(exc)
        record.error = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        record.ended = time.monotonic()
        record.text = "".join(parts)
    return record
