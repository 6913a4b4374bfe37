"""The sim answering tasks (issue 31 item 2; docs/sim.md, "Tasks and natural length"): a request sent without
``ignore_eos`` stops by itself after the profile's ``natural_tokens`` (N, or drawn from [lo, hi] by the request's
seed), and a prompt of the built-in task set (``solve_task`` of the public API reads its answer from the prompt)
ends with ``Answer: X`` — right with the profile's ``task_accuracy``, else a wrong one. What the sim decided is
in its record (``/debug/truth``: ``task_answer``, ``answered``, ``task_correct``), so a test judges the client's
stored accuracy and token statistics against what the sim was told and did."""

from __future__ import annotations

import random
from typing import Any

from infermatrix.plugin import solve_task
from infermatrix.plugins.sim import tokenizer as tok
from infermatrix.plugins.sim.profile import SimProfile
from infermatrix.plugins.sim.textgen import TextStream

__all__ = ["prompt_task_answer", "natural_limit", "AnswerStream", "plan_answer"]

_MARK = "What number do you end with?", "appear in '", "backwards.", "Sort these words alphabetically:"


def prompt_task_answer(body: Any, api: str, ignore_eos: bool) -> str | None:
    """The answer a built-in task prompt asks for; None for any other request (or one sent with ignore_eos: the
    matrix's, which must run to max_tokens). A cheap substring test first: the matrix's long prompts skip the regexes."""
    if ignore_eos or not isinstance(body, dict):
        return None
    if api == "chat":
        messages = body.get("messages") or []
        text = tok.message_text(messages[-1].get("content")) if messages and isinstance(messages[-1], dict) else ""
    else:
        prompt = body.get("prompt")
        text = prompt if isinstance(prompt, str) else ""
    if not any(m in text for m in _MARK):
        return None
    return solve_task(text)


def natural_limit(p: SimProfile, rng: random.Random) -> int | None:
    """The natural length of one request (``natural_tokens``), drawn from its own seeded generator."""
    spec = p.natural_tokens
    if spec is None:
        return None
    return spec if isinstance(spec, int) else rng.randint(spec[0], spec[1])


def _wrong(answer: str, rng: random.Random) -> str:
    try:
        return str(int(answer) + rng.choice((-1, 1)) * rng.randint(1, 9))
    except ValueError:
        flipped = answer[::-1]
        return flipped if flipped != answer else answer + "x"


class AnswerStream:
    """The request's words, then ``Answer: X`` as its last tokens (cut from the front if the end comes first)."""

    __slots__ = ("_words", "_pos", "_limit", "_suffix")

    def __init__(self, words: TextStream, limit: int, suffix: list[str]) -> None:
        self._words, self._pos, self._limit, self._suffix = words, 0, limit, suffix

    def take(self, n: int) -> str:
        start_suffix = max(0, self._limit - len(self._suffix))
        out = []
        plain = max(0, min(n, start_suffix - self._pos))
        if plain:
            out.append(self._words.take(plain))
        for i in range(self._pos + plain, self._pos + n):
            k = i - start_suffix
            out.append(self._suffix[k] if 0 <= k < len(self._suffix) else self._words.take(1))
        self._pos += n
        return "".join(out)


def plan_answer(p: SimProfile, answer: str, limit: int, rng: random.Random, words: TextStream) -> tuple[AnswerStream, dict[str, Any]]:
    """The stream that ends in the answer, and the truth kept for the record."""
    right = rng.random() < p.task_accuracy
    said = answer if right else _wrong(answer, rng)
    suffix = tok._TOKEN_RE.findall(f" Answer: {said}")  # one emitted token per piece of the sim's own tokenizer
    whole = limit >= len(suffix)
    return AnswerStream(words, limit, suffix), {"task_answer": answer, "answered": said if whole else None, "task_correct": right and whole}
