"""OpenAI-API request parsing and response shapes, as vLLM's server writes them.

Kept apart from the HTTP layer so the shapes can be read (and tested) in one place.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from infermatrix.plugins.sim import tokenizer as tok
from infermatrix.plugins.sim.profile import SimProfile

__all__ = ["ApiError", "PromptInfo", "GenRequest", "parse_generation", "analyze_text", "analyze_chat", "Shapes", "LOOP_MARKER"]

LOOP_MARKER = "[[loop]]"  # a prompt containing this loops, whatever the profile says (for tests)


class ApiError(Exception):
    """An error answer: ``{"error": {"message", "type", "param", "code"}}`` with HTTP status ``code``."""

    def __init__(self, status: int, message: str, type_: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param = status, message, type_, param

    def body(self) -> bytes:
        return orjson.dumps({"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.status}})


@dataclass(slots=True, frozen=True)
class PromptInfo:
    tokens: int
    blocks: tuple[int, ...]  # chain hashes of the full blocks, for the prefix cache and shared KV
    loop_marker: bool


def _chain(pieces: list[Any], bs: int, join: bool) -> tuple[int, ...]:
    out = []
    h = 0
    for i in range(0, len(pieces) - bs + 1, bs):
        block = pieces[i : i + bs]
        h = hash((h, "".join(block) if join else tuple(block)))
        out.append(h)
    return tuple(out)


# Prompts come back again and again (warm-up, closed-loop restarts): remember their analysis, bounded
# by the blocks held. Keys are (kind, length, hash) so the cache never holds the prompt text itself.
_CACHE: OrderedDict[tuple[Any, ...], PromptInfo] = OrderedDict()
_CACHE_BLOCKS = [0]
_CACHE_MAX_BLOCKS = 2_000_000


def _remember(key: tuple[Any, ...], info: PromptInfo) -> PromptInfo:
    _CACHE[key] = info
    _CACHE_BLOCKS[0] += len(info.blocks) + 1
    while _CACHE_BLOCKS[0] > _CACHE_MAX_BLOCKS and _CACHE:
        _, old = _CACHE.popitem(last=False)
        _CACHE_BLOCKS[0] -= len(old.blocks) + 1
    return info


def analyze_text(text: str, bs: int) -> PromptInfo:
    key = ("text", bs, len(text), hash(text))
    info = _CACHE.get(key)
    if info is not None:
        _CACHE.move_to_end(key)
        return info
    pieces = tok.split(text)
    return _remember(key, PromptInfo(len(pieces), _chain(pieces, bs, True), LOOP_MARKER in text))


def analyze_ids(ids: list[int], bs: int) -> PromptInfo:
    return PromptInfo(len(ids), _chain(ids, bs, False), False)


def analyze_chat(messages: list[dict[str, Any]], bs: int) -> PromptInfo:
    flat = tuple((str(m.get("role", "user")), tok.message_text(m.get("content"))) for m in messages)
    key = ("chat", bs, len(flat), hash(flat))
    info = _CACHE.get(key)
    if info is not None:
        _CACHE.move_to_end(key)
        return info
    pieces = tok.chat_tokens(messages)
    return _remember(key, PromptInfo(len(pieces), _chain(pieces, bs, True), any(LOOP_MARKER in c for _, c in flat)))


def check_model(body: dict[str, Any], profile: SimProfile) -> None:
    model = body.get("model")
    if model is not None and model != profile.model:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")


def check_messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ApiError(400, "messages must be a non-empty list of message objects", param="messages")
    return messages


def completion_prompt(body: dict[str, Any], bs: int) -> PromptInfo:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return analyze_text(prompt, bs)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return analyze_ids(prompt, bs)
    if isinstance(prompt, list) and len(prompt) > 1:
        raise ApiError(400, "only one prompt per request is supported by infermatrix-sim", param="prompt")
    raise ApiError(400, "prompt must be a string or a list of token ids", param="prompt")


@dataclass(slots=True)
class GenRequest:
    api: str  # "completions" | "chat"
    prompt: PromptInfo
    max_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool
    ignore_eos: bool
    seed: int | None
    request_id: str | None


def _int_field(body: dict[str, Any], name: str) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool):
        raise ApiError(400, f"{name} must be an integer", param=name)
    return v


def parse_generation(body: dict[str, Any], api: str, profile: SimProfile, request_id: str | None) -> GenRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    check_model(body, profile)
    if api == "chat":
        prompt = analyze_chat(check_messages(body.get("messages")), profile.block_size)
        max_tokens = _int_field(body, "max_completion_tokens")
        if max_tokens is None:
            max_tokens = _int_field(body, "max_tokens")
    else:
        prompt = completion_prompt(body, profile.block_size)
        max_tokens = _int_field(body, "max_tokens")
    n = body.get("n", 1)
    if n not in (1, None):
        raise ApiError(400, "n > 1 is not supported by infermatrix-sim", param="n")
    limit = profile.max_model_len
    if max_tokens is None:
        max_tokens = limit - prompt.tokens  # vLLM's default: whatever room is left
    if max_tokens < 1:
        if prompt.tokens >= limit:
            raise ApiError(400, f"This model's maximum context length is {limit} tokens. However, your request has "
                                f"{prompt.tokens} input tokens. Please reduce the length of the input messages.")  # fmt: skip
        raise ApiError(400, "max_tokens must be at least 1", param="max_tokens")
    if prompt.tokens + max_tokens > limit:
        where = "messages" if api == "chat" else "prompt"
        raise ApiError(400, f"This model's maximum context length is {limit} tokens. However, you requested "
                            f"{prompt.tokens + max_tokens} tokens ({prompt.tokens} in the {where}, {max_tokens} in the "
                            f"completion). Please reduce the length of the {where} or completion.")  # fmt: skip
    stream = bool(body.get("stream", False))
    so = body.get("stream_options") or {}
    if not isinstance(so, dict):
        raise ApiError(400, "stream_options must be an object", param="stream_options")
    if so and not stream:
        raise ApiError(400, "Stream options can only be defined when `stream=True`.", param="stream_options")
    # As in vLLM: continuous stats are an addition to include_usage, not a switch of their own.
    include_usage = bool(so.get("include_usage")) and profile.usage
    continuous = include_usage and bool(so.get("continuous_usage_stats")) and profile.continuous_usage_stats
    seed = _int_field(body, "seed")
    rid = body.get("request_id") if isinstance(body.get("request_id"), str) else request_id
    return GenRequest(api, prompt, max_tokens, stream, include_usage, continuous, bool(body.get("ignore_eos", False)), seed, rid)


class Shapes:
    """Builds the JSON of one request's answer (chunks, final usage, whole response)."""

    __slots__ = ("id", "created", "model", "chat", "prompt_tokens", "_obj")

    def __init__(self, id: str, model: str, chat: bool, prompt_tokens: int):
        self.id, self.model, self.chat, self.prompt_tokens = id, model, chat, prompt_tokens
        self.created = int(time.time())
        self._obj = "chat.completion.chunk" if chat else "text_completion"

    def usage(self, completion: int) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens + completion, "completion_tokens": completion}

    def _chunk(self, choice: dict[str, Any], usage: int | None) -> bytes:
        obj: dict[str, Any] = {"id": self.id, "object": self._obj, "created": self.created, "model": self.model, "choices": [choice]}
        if usage is not None:
            obj["usage"] = self.usage(usage)
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    def role_chunk(self, usage: int | None) -> bytes:
        return self._chunk({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}, usage)

    def text_chunk(self, reasoning: str, text: str, finish: str | None, usage: int | None) -> bytes:
        """One step's output. A step that crosses the end of reasoning carries both fields, as vLLM's
        reasoning parsers send it, so there is still exactly one chunk per engine step."""
        if self.chat:
            delta = {"reasoning_content": reasoning, "content": text} if reasoning and text else (
                {"reasoning_content": reasoning} if reasoning else {"content": text})
            return self._chunk({"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}, usage)
        return self._chunk({"index": 0, "text": reasoning + text, "logprobs": None, "finish_reason": finish, "stop_reason": None}, usage)

    def usage_chunk(self, completion: int, reasoning: int = 0) -> bytes:
        """The closing usage chunk; with reasoning tokens, OpenAI's ``completion_tokens_details.reasoning_tokens``."""
        usage: dict[str, Any] = dict(self.usage(completion))
        if reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
        obj = {"id": self.id, "object": self._obj, "created": self.created, "model": self.model, "choices": [], "usage": usage}
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    def whole(self, reasoning: str, text: str, finish: str | None, completion: int, usage: bool) -> dict[str, Any]:
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text, "reasoning_content": reasoning or None, "tool_calls": []}
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish, "stop_reason": None}
            obj: dict[str, Any] = {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model, "choices": [choice]}
        else:
            choice = {"index": 0, "text": reasoning + text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
            obj = {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model, "choices": [choice]}
        if usage:
            obj["usage"] = self.usage(completion)
        return obj
