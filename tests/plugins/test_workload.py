"""The built-in workload: exact token lengths, distinct per key, deterministic, few tokenizer calls."""

from __future__ import annotations

import math
import re

import anyio
import pytest

from infermatrix.plugin import MatrixConfig, PromptBuilder, prompt_tolerance
from infermatrix.core.workloads import make_workload
from infermatrix.testing import plugin_manager

pytestmark = pytest.mark.anyio

LENGTHS = [100, 1000, 8192, 65536]
KEYS = ["cell-8192-4-s0", "cell-8192-4-s1", "cell-8192-4-s12", "prefill-8192", "x"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class WordTokenizer:
    """One token per word or punctuation mark."""

    exact = True

    def __init__(self) -> None:
        self.calls = 0

    async def count(self, text: str) -> int:
        self.calls += 1
        await anyio.sleep(0)  # a real one awaits an HTTP round trip
        return len(re.findall(r"\w+|[^\w\s]", text))


class PieceTokenizer(WordTokenizer):
    """Coarser, BPE-like: each word with its leading space, ~4 characters per token."""

    async def count(self, text: str) -> int:
        self.calls += 1
        await anyio.sleep(0)
        return sum(math.ceil(len(p) / 4) for p in re.findall(r"\s*(?:\w+|[^\w\s])", text))


class CharTokenizer(WordTokenizer):
    """A chars-per-token estimate, with a BOS token, the way a calibrated fallback counts."""

    def __init__(self, chars_per_token: float = 4.0) -> None:
        super().__init__()
        self.cpt = chars_per_token

    async def count(self, text: str) -> int:
        self.calls += 1
        return 1 + math.ceil(len(text) / self.cpt)


TOKENIZERS = [WordTokenizer, PieceTokenizer, CharTokenizer]


@pytest.mark.parametrize("tok_cls", TOKENIZERS, ids=lambda c: c.__name__)
async def test_exact_lengths_and_few_calls(tok_cls: type[WordTokenizer]) -> None:
    tok = tok_cls()
    builder = PromptBuilder(7, "distinct", tok)
    for length in LENGTHS:
        for i, key in enumerate(KEYS):
            before = tok.calls
            p = await builder.prompt(length, key)
            calls = tok.calls - before
            assert p.tokens == length, (length, key)
            assert p.key == key
            assert calls <= 8
            if i:  # later keys reuse the length's fit: one count, sometimes a second to fix up
                assert calls <= 3
            assert await tok.count(p.text) == length
    # The ~1–2 calls per prompt the builder promises, on average over all prompts.
    assert builder.calls <= 2.5 * len(LENGTHS) * len(KEYS)


async def test_distinct_prefixes_per_key() -> None:
    builder = PromptBuilder(7, "distinct", WordTokenizer())
    prompts = [await builder.prompt(1000, key) for key in KEYS]
    heads = {p.text[:64] for p in prompts}
    assert len(heads) == len(KEYS)
    # Different lengths for the same key differ from the start too, so no prefix is shared.
    other = await builder.prompt(2000, KEYS[0])
    assert other.text[:32] != prompts[0].text[:32]


async def test_shared_mode_gives_one_prompt_per_length() -> None:
    tok = WordTokenizer()
    builder = PromptBuilder(7, "shared", tok)
    prompts = [await builder.prompt(1000, key) for key in KEYS]
    assert len({p.text for p in prompts}) == 1
    assert [p.key for p in prompts] == KEYS  # the key is still recorded
    calls = tok.calls
    await builder.prompt(1000, "another")
    assert tok.calls == calls  # the same prompt again costs nothing
    cold = await builder.prompt(1000, "prefill-1000", distinct=True)
    assert cold.text != prompts[0].text and cold.tokens == 1000


async def test_deterministic_by_seed_and_key() -> None:
    a = PromptBuilder(3, "distinct", PieceTokenizer())
    b = PromptBuilder(3, "distinct", PieceTokenizer())
    c = PromptBuilder(4, "distinct", PieceTokenizer())
    # b builds in another order: the text must not depend on what was built before.
    pa = [await a.prompt(n, k) for n in (500, 4096) for k in ("s0", "s1")]
    pb = [await b.prompt(n, k) for n in (4096, 500) for k in ("s1", "s0")]
    assert sorted(p.text for p in pa) == sorted(p.text for p in pb)
    pc = await c.prompt(500, "s0")
    assert pc.text != pa[0].text


async def test_prose_like_text() -> None:
    p = await PromptBuilder(0, "distinct", WordTokenizer()).prompt(8192, "s0")
    assert p.text.startswith("[ctx 8192 stream s0 run-seed 0] ")
    assert "\n\n" in p.text and ". " in p.text
    assert re.search(r"\d", p.text)
    words = re.findall(r"[a-z]+", p.text.lower())
    assert len(set(words)) > 150  # a vocabulary, not a repeated phrase


async def test_concurrent_callers_search_once() -> None:
    tok = WordTokenizer()
    builder = PromptBuilder(1, "distinct", tok)
    results: dict[str, int] = {}

    async def one(key: str) -> None:
        results[key] = (await builder.prompt(8192, key)).tokens

    async with anyio.create_task_group() as tg:
        for i in range(32):
            tg.start_soon(one, f"s{i}")
    assert results == {f"s{i}": 8192 for i in range(32)}
    assert tok.calls <= 8 + 3 * 31


async def test_text_does_not_depend_on_order() -> None:
    keys = [f"s{i}" for i in range(12)] + ["prefill-8192", "cell-8192-16-s15"]
    a = PromptBuilder(2, "distinct", PieceTokenizer())
    texts: dict[str, str] = {}

    async def one(key: str) -> None:
        texts[key] = (await a.prompt(8192, key)).text

    async with anyio.create_task_group() as tg:
        for key in keys:
            tg.start_soon(one, key)
    b = PromptBuilder(2, "distinct", PieceTokenizer())
    await b.prompt(3000, "warm-up")  # other state first: other lengths, other hints
    for key in reversed(keys):
        assert (await b.prompt(8192, key)).text == texts[key]


async def test_within_tolerance_when_exact_is_out_of_reach() -> None:
    # 3 characters per token: a 4-character pad moves the count by 1 or 2, so some targets are
    # skipped; the builder must still land within tolerance.
    tok = CharTokenizer(3.0)
    builder = PromptBuilder(5, "distinct", tok)
    for length in (1000, 8192):
        for key in KEYS:
            p = await builder.prompt(length, key)
            assert abs(p.tokens - length) <= prompt_tolerance(length)
            assert p.tokens == await tok.count(p.text)


class HugeTokenizer(WordTokenizer):
    """Every text is at least 10,000 tokens: short targets can't be met."""

    async def count(self, text: str) -> int:
        self.calls += 1
        return 10_000 + len(text)


@pytest.mark.parametrize("bad", [0, -5])
async def test_not_a_length(bad: int) -> None:
    with pytest.raises(ValueError, match="positive number of tokens"):
        await PromptBuilder(0, "distinct", WordTokenizer()).prompt(bad, "s0")


async def test_impossible_target_raises() -> None:
    tok = HugeTokenizer()
    with pytest.raises(ValueError, match="cannot build a prompt of 100 tokens"):
        await PromptBuilder(0, "distinct", tok).prompt(100, "s0")
    assert tok.calls <= 8


def test_tolerance_rule() -> None:
    assert prompt_tolerance(100) == 16
    assert prompt_tolerance(8192) == 41
    assert prompt_tolerance(262144) == 1311


async def test_hook_returns_builder() -> None:
    pm = plugin_manager()  # the public testing kit: a fresh manager with the built-ins
    config = MatrixConfig(seed=9, prompt_mode="shared")
    # Through the registry, as a run asks: the opt-in built-ins (shared-prefix, multi-turn) implement the hook too.
    workload = make_workload(pm, config, WordTokenizer())
    assert isinstance(workload, PromptBuilder)
    assert (workload.seed, workload.prompt_mode) == (9, "shared")
    p = await workload.prompt(256, "s0")
    assert p.tokens == 256
