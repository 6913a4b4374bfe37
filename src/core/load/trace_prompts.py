"""Prompts for a trace replay: exact lengths, and shared prefixes where the trace says so (docs/workloads.md).

A trace gives each request a length, not a text. The text here is built from **blocks**: a block is a
deterministic sequence of ``block_tokens`` one-token words (``" the"``, ``" river"``, …) drawn from a
generator seeded by the run's seed and the block's key. A Mooncake request's keys are its ``hash_ids``,
so two requests whose leading ids agree get the same leading blocks, word for word, hence token for token;
every other block (Azure, BurstGPT, or a Mooncake request without ids) is keyed by the request itself and
shared with nobody. A prompt of n words is its blocks' words cut at n: the last, partial block is that
block's first words, so a partial block shared by two requests is shared up to the shorter of the two.

Why one-token words with a leading space: every byte-level BPE pre-tokenizer (GPT-2, Llama 3, Qwen) and
SentencePiece split at the space, so the words never merge across a block boundary, and a prompt's count
is its words plus the API's fixed overhead (the chat template, a BOS). That overhead is measured once; each
prompt is then counted (the engine's tokenize endpoint or a local tokenizer) and corrected until exact.
With only the server's ``usage.prompt_tokens`` to count by, a count is a prefill that would warm the
engine's prefix cache before the replay, so prompts are not re-counted then (the overhead probe uses
words no prompt starts with).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

import anyio

from infermatrix.core.load.traces import TraceRequest

__all__ = ["BLOCK_WORDS", "TracePrompt", "TracePromptBuilder", "expected_shared_prefix"]

# Common lowercase English words of at most 6 letters: one token each (with the leading space) in the
# common vocabularies, and one token in the sim's regex tokenizer.
BLOCK_WORDS = tuple(
    " " + w
    for w in "the and for not but you all any can had her was one our out day get has him his how man new now old see two "
    "way who boy did its let put say she too use time year work life hand part place case week point world house water "
    "river paper music table window garden market bridge forest stone school friend mother father doctor summer winter".split()
)
PROBE_WORDS = 64  # the overhead probe's length (words)
MAX_RECOUNTS = 3  # corrections of one prompt's word count before its length is taken as counted
COUNT_CONCURRENCY = 8  # prompts counted at once (each may be a /tokenize request)


@dataclass(frozen=True)
class TracePrompt:
    text: str
    tokens: int  # as the tokenizer counts the request (template included): the trace's input length when exact
    words: int  # the block words in it
    shared_prefix_tokens: int  # block words it shares with an earlier request of the replay (the trace's claim)


def _keys(req: TraceRequest, index: int, block_tokens: int, words: int) -> list[Any]:
    """The request's block keys: its hash_ids (Mooncake), else its own (shared with nobody)."""
    n_blocks = -(-words // block_tokens)
    ids = list(req.hash_ids[:n_blocks])
    return ids + [f"r{index}/b{j}" for j in range(len(ids), n_blocks)]


def expected_shared_prefix(reqs: list[TraceRequest], words: list[int], block_tokens: int) -> list[int]:
    """Per request, the most leading words it shares with any earlier request (by their leading hash_ids).

    A trie of hash_ids holds, at each node, the most words an earlier request had below that prefix: two
    requests agreeing on k leading ids share min(k × block, both lengths) words, never more (their next
    blocks differ)."""
    root: dict[int, list[Any]] = {}  # id -> [children, most words of an earlier request through here]
    out = []
    for req, n in zip(reqs, words):
        ids = req.hash_ids[: -(-n // block_tokens)]
        node, shared = root, 0
        for k, h in enumerate(ids, 1):
            entry = node.get(h)
            if entry is None:
                break
            shared = min(k * block_tokens, n, entry[1])
            node = entry[0]
        out.append(shared)
        node = root
        for h in ids:
            entry = node.setdefault(h, [{}, 0])
            entry[1] = max(entry[1], n)
            node = entry[0]
    return out


class TracePromptBuilder:
    """``await TracePromptBuilder(tokenizer, seed, 512).build(requests)`` -> one TracePrompt per request."""

    def __init__(self, tokenizer: Any, seed: int, block_tokens: int, *, recount: bool = True) -> None:
        self.tokenizer, self.seed, self.block_tokens, self.recount = tokenizer, seed, block_tokens, recount
        self._blocks: dict[Any, list[str]] = {}
        self.overhead: int | None = None  # tokens the API adds to the words (template, BOS), once measured
        self.inexact = 0  # prompts whose count could not be made the trace's length

    def block(self, key: Any) -> list[str]:
        words = self._blocks.get(key)
        if words is None:
            rng = random.Random(f"infermatrix-trace-{self.seed}-{key!r}")  # str seed: the same on every machine
            words = self._blocks[key] = rng.choices(BLOCK_WORDS, k=self.block_tokens)
        return words

    def text(self, keys: list[Any], words: int) -> str:
        out: list[str] = []
        for key in keys:
            out.extend(self.block(key)[: words - len(out)])
        return "".join(out)

    async def _overhead(self) -> int:
        probe = "".join(BLOCK_WORDS[-1 - (i % 8)] for i in range(PROBE_WORDS))  # no prompt's block starts so, by chance alone
        return await self.tokenizer.count(probe) - PROBE_WORDS

    async def build(self, reqs: list[TraceRequest], on_built: Callable[[int], None] | None = None) -> list[TracePrompt]:
        if self.overhead is None:
            self.overhead = await self._overhead()
        words = [max(1, r.input_tokens - self.overhead) for r in reqs]
        counts = [w + self.overhead for w in words]
        if self.recount:
            limiter = anyio.Semaphore(COUNT_CONCURRENCY)

            async def exact(i: int) -> None:
                async with limiter:
                    words[i], counts[i] = await self._exact(reqs[i], i, words[i])
                if on_built is not None:
                    on_built(i)

            async with anyio.create_task_group() as tg:
                for i in range(len(reqs)):
                    tg.start_soon(exact, i)
        self.inexact = sum(c != r.input_tokens for c, r in zip(counts, reqs))
        shared = expected_shared_prefix(reqs, words, self.block_tokens)
        return [
            TracePrompt(self.text(_keys(r, i, self.block_tokens, w), w), c, w, s)
            for i, (r, w, c, s) in enumerate(zip(reqs, words, counts, shared))
        ]

    async def _exact(self, req: TraceRequest, index: int, words: int) -> tuple[int, int]:
        """(words, count): the word count whose prompt counts as the trace's length (or the closest tried)."""
        best: tuple[int, int] | None = None
        for _ in range(MAX_RECOUNTS):
            # The keys follow the word count (a longer prompt may need one more block).
            count = await self.tokenizer.count(self.text(_keys(req, index, self.block_tokens, words), words))
            if best is None or abs(count - req.input_tokens) < abs(best[1] - req.input_tokens):
                best = (words, count)
            if count == req.input_tokens or words == 1 and count > req.input_tokens:
                break
            words = max(1, words + req.input_tokens - count)
        assert best is not None
        return best
