"""Which prompts are still warm: a prompt sent earlier in the run is not warmed again while the engine's KV
cache must still hold it (docs/metrics.md, "Warm-up").

The rule, conservative on purpose (an LRU cache of ``kv_tokens`` tokens that never frees anything early):
a prompt is warm when it was sent earlier in this run, to this engine process, and the KV tokens written
since — the prompts sent cold after it (probes, other cells' prompts, this cell's cold prompts) and every
output generated after it was sent (this request counted at ``max_output`` each) — plus the prompt itself
fit in ``kv_tokens``. With the capacity unknown nothing is warm, and an engine restart forgets everything.
"""

from __future__ import annotations

from typing import Iterable

from infermatrix.core.types import Prompt

__all__ = ["WarmCache"]


class WarmCache:
    """KV tokens written so far, and where each prompt was last written or touched, by its text."""

    def __init__(self, kv_tokens: int | None) -> None:
        self.kv_tokens = kv_tokens
        self.written = 0  # KV tokens the engine wrote in this run (prompts sent cold, outputs)
        self._last: dict[str, int] = {}  # prompt text -> ``written`` when it was last sent

    def forget(self) -> None:
        """The engine restarted (or may have): its cache is empty."""
        self.written = 0
        self._last.clear()

    def cold(self, prompts: list[Prompt]) -> list[bool]:
        """Per prompt, whether it must be warmed before a cell that sends all of ``prompts``.

        A prompt repeated in the list is warmed once (its first place). Warming the cold ones writes
        their tokens, which may push out an older one, so the cold set grows until it is stable."""
        first: dict[str, int] = {}
        for i, p in enumerate(prompts):
            first.setdefault(p.text, i)
        cold = {t for t in first if self.kv_tokens is None or t not in self._last}
        while True:
            cold_tokens = sum(prompts[first[t]].tokens for t in cold)
            more = {t for t in first if t not in cold and not self._fits(prompts[first[t]], cold_tokens)}
            if not more:
                break
            cold |= more
        return [first[p.text] == i and p.text in cold for i, p in enumerate(prompts)]

    def _fits(self, p: Prompt, extra: int) -> bool:
        assert self.kv_tokens is not None
        return (self.written - self._last[p.text]) + extra + p.tokens <= self.kv_tokens

    def wrote(self, tokens: int) -> None:
        """Tokens written by requests whose prompts are never sent again (cold prefill probes)."""
        self.written += tokens

    def sent(
        self, prompts: Iterable[Prompt], cold: Iterable[bool] | None = None, outputs: int = 0, answered: Iterable[bool] | None = None,
    ) -> None:
        """``prompts`` were sent (the ``cold`` ones written anew, all of them touched), then ``outputs``
        tokens generated: a warm-up, a cell, or a prefill probe (``outputs`` = its one token).

        ``answered`` (default: all) says, per prompt, whether the engine produced a first token for it: only
        then is its prefix known to be in the cache. An unanswered one (rejected, failed, cut off) is forgotten,
        so it is warmed again before it is measured; its tokens still count as written (conservative)."""
        prompts = list(prompts)
        flags = list(cold) if cold is not None else [True] * len(prompts)
        oks = list(answered) if answered is not None else [True] * len(prompts)
        for p, was_cold in zip(prompts, flags):
            if was_cold:
                self.written += p.tokens
        held = {p.text for p, ok in zip(prompts, oks) if ok}  # a shared prompt is held if any send of it was answered
        for p in prompts:
            if p.text in held:
                self._last[p.text] = self.written
            else:
                self._last.pop(p.text, None)
        self.written += outputs
