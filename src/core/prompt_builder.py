"""The prompt builder (DESIGN §2.3): prompts of an exact token length, distinct per key, by seed.

It is the built-in ``workload`` plugin's ``Workload`` (plugins/workload.py) and part of the public plugin API
(``infermatrix.plugin``: ``PromptBuilder``, ``PROSE_WORDS``, ``prompt_tolerance``), so the other built-in
workloads and a third party's build on it the same way: use it as is, or subclass it and override ``head``.

A prompt is ``head + body + pads``:

* ``head`` — ``[ctx 8192 stream <key> run-seed 7]`` and a few seeded words. It comes first, so no
  two keys share even the first KV block (prefix caches match from the start). In ``shared`` mode
  the tag reads ``shared`` instead, so every stream of a context gets the same prompt.
* ``body`` — the first k words of one endless, seed-determined stream of prose.
* ``pads`` — j short words (" the", " and", …) that are one token in common vocabularies; they
  take up the last few tokens, so exactness doesn't depend on where a body word ends.

The tokenizer's count is the truth, and each count may be a /tokenize request, so calls are few:
one calibration sample per builder (tokens per character); per length, a secant search over k for
the shared head, landing PAD_LO..PAD_HI tokens short, then pads; per key, the length's (k, j) with
the key's head, re-counted and the pads corrected (one or two calls). Nothing depends on the order
prompts are asked for, so a prompt's text is a function of (seed, key, length, tokenizer).
"""

from __future__ import annotations

import bisect
import itertools
import math
import random

import anyio

from infermatrix.core.types import Prompt, Tokenizer

__all__ = ["PromptBuilder", "PROSE_WORDS", "prompt_tolerance", "MAX_SEARCH_CALLS", "MAX_PAD_CALLS"]

# Common English words, most frequent first; drawn with Zipf-like weights so the text has the
# token statistics of prose (the model reads it, and its tokenisation rate is typical).
PROSE_WORDS: tuple[str, ...] = tuple("""
the of and to in a is that for it as was with be by on not he this are or his from at which but
have an they you were her she there been one all we their has would when if so no will more can
out said what up its about into than them only other time new some could these two may first
then do any like my now over such our man me even most made after also did many before must
through back years where much your way well down should because each just those people how too
little state good very make world still own see men work long get here between both life being
under never day same another know while last might us great old year off come since against go
came right used take three small house place found part water light hand high every land across
city left name keep morning river along table window story garden paper music number answer
village winter summer letter market bridge forest mountain island ocean station road field stone
evening school family friend mother father doctor teacher farmer baker student captain engineer
bright quiet heavy early simple careful gentle narrow ancient modern warm cold green silver
golden wooden open broken hidden distant sudden strange common clear certain whole easy usual
walked turned looked carried opened closed watched followed noticed wrote painted built counted
measured listened waited remembered explained promised decided seemed began wanted learned
slowly quickly rarely often almost perhaps already together outside beneath beyond toward during
""".split())
_CUM = list(itertools.accumulate(1.0 / (rank + 1) ** 0.9 for rank in range(len(PROSE_WORDS))))

# Three letters and a leading space: a single token in GPT-2/cl100k/Llama/Qwen vocabularies, one
# word for a word-level count, and exactly 4 characters for a chars/4 estimate.
PAD_WORDS = tuple(
    " " + w
    for w in "the and for not but you all any can had her was one our out day get has him his how man new "
    "now old see two way who boy did its let put say she too use".split()
)

# The word search aims for L - PAD_HI <= count <= L - PAD_LO; the pads then fill the rest. PAD_LO
# is the room left for other keys: a key whose tag is up to PAD_LO tokens longer than "shared"
# ("stream cell-262144-256-s255" is ~12 in BPE) just takes fewer pads; a longer one costs a search.
PAD_LO, PAD_HI = 16, 40
MAX_SEARCH_CALLS = 8
MAX_PAD_CALLS = 4
# Words in the calibration sample (~2,600 tokens): long enough for a stable tokens-per-char rate.
CALIBRATION_WORDS = 2000


def prompt_tolerance(context_tokens: int) -> int:
    """Largest accepted miss, in tokens (DESIGN §2.3)."""
    return max(16, math.ceil(0.005 * context_tokens))


def _pads(j: int) -> str:
    return "".join(PAD_WORDS[i % len(PAD_WORDS)] for i in range(j))


def _number(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.4:
        return str(rng.randint(2, 99))
    if kind < 0.7:
        return str(rng.randint(1850, 2030))
    return f"{rng.randint(1, 999)}.{rng.randint(0, 9)}"


class _Filler:
    """One endless, seed-determined stream of prose, cut at word boundaries."""

    def __init__(self, seed: int) -> None:
        # A string seed is hashed with SHA-512 by random: the same on every machine and run.
        self._rng = random.Random(f"infermatrix-filler-{seed}")
        self._units: list[str] = []  # each word with its leading separator and trailing mark
        self._ends: list[int] = [0]  # _ends[k] = characters in the first k units
        self._text = ""
        self._sentences_left = self._rng.randint(3, 7)  # sentences until the next paragraph break

    def _grow(self, at_least: int) -> None:
        rng, goal = self._rng, len(self._units) + at_least
        while len(self._units) < goal:
            n = rng.randint(6, 22)
            words = rng.choices(PROSE_WORDS, cum_weights=_CUM, k=n)
            if rng.random() < 0.25:
                words[rng.randrange(1, n)] = _number(rng)
            words[0] = words[0].capitalize()
            if n > 10 and rng.random() < 0.5:
                words[rng.randrange(3, n - 3)] += ","
            words[-1] += rng.choice("......?!")
            # Paragraphs of 3-7 sentences, so the text has line breaks like a document.
            self._sentences_left -= 1
            if self._sentences_left < 0:
                self._sentences_left = rng.randint(3, 7)
                self._units.append("\n\n" + words[0])
            else:
                self._units.append(" " + words[0])
            self._units.extend(" " + w for w in words[1:])
        ends, total = self._ends, self._ends[-1]
        for unit in self._units[len(ends) - 1 :]:
            total += len(unit)
            ends.append(total)
        self._text = "".join(self._units)

    def chars(self, k: int) -> int:
        """Characters in the first ``k`` words."""
        if k >= len(self._ends):
            self._grow(max(4096, k - len(self._units)))
        return self._ends[k]

    def words_for_chars(self, chars: float) -> int:
        """Fewest words whose text has at least ``chars`` characters."""
        while self._ends[-1] < chars:
            self._grow(max(4096, len(self._units)))
        return bisect.bisect_left(self._ends, chars)

    def text(self, k: int) -> str:
        end = self.chars(k)  # may grow the text: read it after
        return self._text[:end]


class PromptBuilder:
    """The ``Workload``: ``await builder.prompt(8192, "cell-8192-4-s3")``."""

    def __init__(self, seed: int, prompt_mode: str, tokenizer: Tokenizer) -> None:
        if prompt_mode not in ("distinct", "shared"):
            raise ValueError(f"prompt_mode must be 'distinct' or 'shared', not {prompt_mode!r}")
        self.seed = seed
        self.prompt_mode = prompt_mode
        self.tokenizer = tokenizer
        self.calls = 0  # tokenizer.count calls so far (each may be a /tokenize request)
        self._filler = _Filler(seed)
        self._tpc: float | None = None  # tokens per character of the filler, once calibrated
        self._calibration_lock = anyio.Lock()
        self._fits: dict[int, tuple[int, int, int]] = {}  # context -> (k, j, count) for the shared head
        self._done: dict[tuple[int, str], tuple[int, int, int]] = {}  # (context, head) -> (k, j, count)
        self._locks: dict[int, anyio.Lock] = {}
        # context -> pad shift the last exact refit needed, 0 -> the latest at any length: first guesses only
        self._hints: dict[int, int] = {}

    def head(self, context_tokens: int, key: str, distinct: bool | None = None) -> str:
        """The prompt's first characters: what makes it distinct (or, shared, the same)."""
        if distinct is None:
            distinct = self.prompt_mode == "distinct"
        tag = f"stream {key}" if distinct else "shared"
        # The words after the tag depend on the length, not the key: heads of keys shaped alike
        # ("s0", "s1", …) then count alike, and a key's pad correction usually works for the next.
        rng = random.Random(f"infermatrix-head-{self.seed}-{context_tokens}")
        words = " ".join(rng.choices(PROSE_WORDS, k=4)).capitalize()
        # Length and tag first: a prefix cache matches whole blocks from the start, and a tokenizer that
        # splits numbers into digits makes "run-seed 0 ctx 16384 " alone ~12 tokens, so behind a chat
        # template two keys could otherwise share a whole first block (16 tokens).
        return f"[ctx {context_tokens} {tag} run-seed {self.seed}] {words}."

    async def prompt(self, context_tokens: int, key: str, *, distinct: bool | None = None) -> Prompt:
        """A prompt of ``context_tokens`` tokens (as the tokenizer counts), deterministic by seed and key.

        :param distinct: override the run's ``prompt_mode`` (``True`` for a cold prefill probe in a
            shared-mode run); ``None`` follows it.
        :raises ValueError: the length can't be reached within ``prompt_tolerance(context_tokens)``.
        """
        if isinstance(context_tokens, bool) or not isinstance(context_tokens, int) or context_tokens < 1:
            raise ValueError(f"context_tokens must be a positive number of tokens, not {context_tokens!r}")
        target = context_tokens
        head = self.head(target, key, distinct)
        recipe = self._done.get((target, head))
        if recipe is None:
            fit = await self._fit(target)
            if head == self.head(target, key, distinct=False):
                recipe = fit  # the shared prompt is the reference itself
            else:
                recipe = await self._refit(head, target, fit[:2])
                self._check(target, recipe[2])
            self._done[(target, head)] = recipe
        k, j, count = recipe
        return Prompt(text=self._render(head, k, j), tokens=count, key=key)

    async def _fit(self, target: int) -> tuple[int, int, int]:
        """(k, j, count) for the shared head at this length: every key's search starts from it.

        It depends on nothing but seed, length and tokenizer (never on which key came first, or on
        what was built before), so a prompt's text is a function of (seed, key, length) alone.
        Concurrent callers wait for one search instead of each hammering /tokenize.
        """
        async with self._locks.setdefault(target, anyio.Lock()):
            if target not in self._fits:
                await self._calibrate()
                fit = await self._search(self.head(target, "", distinct=False), target)
                self._check(target, fit[2])
                self._fits[target] = fit
        return self._fits[target]

    async def _calibrate(self) -> None:
        """Tokens per character of the filler, from one fixed sample: every search's first guess."""
        async with self._calibration_lock:
            if self._tpc is None:
                sample = self._filler.text(CALIBRATION_WORDS)
                self._tpc = max(await self._count(sample), 1) / len(sample)

    def _check(self, target: int, count: int) -> None:
        if abs(count - target) > prompt_tolerance(target):
            raise ValueError(
                f"cannot build a prompt of {target} tokens: the closest has {count} "
                f"(tolerance ±{prompt_tolerance(target)}); the prompt's distinct head alone may be longer"
            )

    def _render(self, head: str, k: int, j: int) -> str:
        return head + self._filler.text(k) + _pads(j)

    async def _count(self, text: str) -> int:
        self.calls += 1
        return await self.tokenizer.count(text)

    async def _search(self, head: str, target: int) -> tuple[int, int, int]:
        """Find (k, j, count) from scratch: words first, to just short of the target, then pads."""
        lo_goal, hi_goal, aim = target - PAD_HI, target - PAD_LO, target - (PAD_LO + PAD_HI) // 2
        below: tuple[int, int] | None = None  # most words whose count <= hi_goal
        above: tuple[int, int] | None = None  # fewest words whose count > hi_goal
        # Everything here follows from (head, target, tokenizer): no state of earlier searches.
        tpc = self._tpc or 0.25
        k = self._filler.words_for_chars(max(0.0, aim / tpc - len(head)))
        for _ in range(MAX_SEARCH_CALLS):
            text = self._render(head, k, 0)
            c = await self._count(text)
            if len(text) >= 200:
                tpc = c / len(text)  # this length's own rate, for the next guess
            if c <= hi_goal:
                below = (k, c) if below is None or k > below[0] else below
                if c >= lo_goal:
                    break
            else:
                above = (k, c) if above is None or k < above[0] else above
                if k == 0:
                    break  # the head alone is (nearly) too long
            if below and above and above[0] - below[0] <= 1:
                break  # one word jumps over the whole pad window: pads bridge the gap
            # Secant across the bracket when there is one (the local rate), else the learned rate.
            rate = tpc
            if below and above:
                chars = self._filler.chars(above[0]) - self._filler.chars(below[0])
                rate = (above[1] - below[1]) / max(1, chars)
            want = self._filler.chars(k) + (aim - c) / max(rate, 1e-3)
            nxt = self._filler.words_for_chars(max(0.0, want))
            if below:
                nxt = max(nxt, below[0] + 1)
            if above:
                nxt = min(nxt, above[0] - 1)
            if nxt == k:
                nxt = k + (1 if c < aim else -1)
            k = max(0, nxt)
        base = below or above
        assert base is not None
        k, c = base
        if c >= target:
            return k, 0, c  # pads only add tokens
        return await self._tune_pads(head, target, k, [(0, c)])

    async def _refit(self, head: str, target: int, fit: tuple[int, int]) -> tuple[int, int, int]:
        """Another key's head on the length's (k, j): correct the pads, rarely search again.

        The count grows strictly with the pads, so at most one j is exact for this k, and any
        starting j that finds it finds the same prompt. The pad shift the last key needed is tried
        first (usually exact in one call); only exact answers are taken from it, everything else
        follows the canonical path (start at the fit's j, then a fresh search), which depends on
        nothing but the head.
        """
        k, j_fit = fit
        hint = self._hints.get(target, self._hints.get(0))  # this length's, else the latest anywhere
        if hint and j_fit + hint >= 0:
            found = await self._pads_from(head, target, k, j_fit + hint)
            if found[2] == target:
                self._hints[target] = self._hints[0] = found[1] - j_fit
                return found
        found = await self._pads_from(head, target, k, j_fit)
        if found[2] == target:
            self._hints[target] = self._hints[0] = found[1] - j_fit
            return found
        again = await self._search(head, target)
        return min(found, again, key=lambda r: abs(r[2] - target))

    async def _pads_from(self, head: str, target: int, k: int, j: int) -> tuple[int, int, int]:
        return await self._tune_pads(head, target, k, [(j, await self._count(self._render(head, k, j)))])

    async def _tune_pads(
        self, head: str, target: int, k: int, obs: list[tuple[int, int]]
    ) -> tuple[int, int, int]:
        """Adjust the pad count j from observed (j, count) pairs; best (k, j, count) found."""
        for _ in range(MAX_PAD_CALLS):
            j, c = obs[-1]
            if c == target:
                break
            slope = 1.0  # tokens per pad word, unless the last two counts say otherwise
            if len(obs) >= 2:
                (j1, c1), (j2, c2) = obs[-2], obs[-1]
                if j1 != j2 and c1 != c2:
                    slope = max(0.25, (c2 - c1) / (j2 - j1))
            nxt = j + round((target - c) / slope)
            if nxt == j:
                nxt = j + (1 if c < target else -1)
            if nxt < 0 or any(nxt == o[0] for o in obs):
                break  # can't drop below no pads, or we'd go round in circles
            obs.append((nxt, await self._count(self._render(head, k, nxt))))
        j, c = min(obs, key=lambda o: (abs(o[1] - target), o[1] > target))
        return k, j, c
