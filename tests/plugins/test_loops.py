"""The built-in loop detector: no false positives on natural-like text, every injected loop caught."""

from __future__ import annotations

import itertools
import math
import random

import pluggy
import pytest

from infermatrix.plugin import LoopConfig
from infermatrix.plugins.loops import find_loop, loop_verdict, tokenize
from infermatrix.testing import plugin_manager

_SYLLABLES = "ka lo mi ne ru ta shi po ve da en or an is th qu ex al um io be".split()
_ENDS = list(".....?!:;")


class TextGen:
    """Natural-language-like text: Zipf-ranked pseudo-words, commas, numbers, sentences of 3–30 words."""

    def __init__(self, seed: int, vocab: int = 3000) -> None:
        self.rng = random.Random(seed)
        words: set[str] = set()
        while len(words) < vocab:
            syllables = self.rng.choice((1, 1, 2, 2, 2, 3, 3, 4))
            words.add("".join(self.rng.choice(_SYLLABLES) for _ in range(syllables)))
        self.words = sorted(words)
        self.rng.shuffle(self.words)  # rank is random, not alphabetical
        self.cum = list(itertools.accumulate(1.0 / (r + 1) ** 1.07 for r in range(vocab)))

    def word(self) -> str:
        return self.rng.choices(self.words, cum_weights=self.cum)[0]

    def tokens(self, n: int) -> list[str]:
        """``n`` pseudo-tokens, exactly as ``tokenize`` would split the rendered text."""
        rng, out = self.rng, []
        while len(out) < n:
            k = rng.randint(3, 30)
            sentence = rng.choices(self.words, cum_weights=self.cum, k=k)
            sentence[0] = sentence[0].capitalize()
            if k > 8 and rng.random() < 0.5:
                sentence.insert(rng.randint(2, k - 2), ",")
            if rng.random() < 0.2:
                sentence.insert(rng.randint(1, len(sentence) - 1), str(rng.randint(0, 2099)))
            sentence.append(rng.choice(_ENDS))
            out.extend(sentence)
        return out[:n]


def render(tokens: list[str], rng: random.Random) -> str:
    """Join pseudo-tokens the way prose is written: punctuation attached, the odd line break."""
    parts = []
    for t in tokens:
        if t.isalnum() or not parts:
            parts.append(" " if rng.random() < 0.97 else "\n\n")
        parts.append(t)
    return "".join(parts).strip()


def loop_copies(period: int) -> int:
    """Copies an injected loop gets: ≥ 8 for p ≤ 64, ≥ 4 above, and enough for the 64-token span."""
    return max(8 if period <= 64 else 4, math.ceil(64 / period))


@pytest.mark.slow  # 10,000 texts: a statistical check, not a unit test
def test_no_false_positive_on_random_text() -> None:
    gen = TextGen(seed=20240601)
    rng = random.Random(7)
    hits = []
    for i in range(10_000):
        text = render(gen.tokens(rng.randint(50, 3000)), rng)
        finding = loop_verdict(text, LoopConfig())  # both of the hook's rules
        if finding is not None:
            hits.append((i, finding))
    assert hits == []


@pytest.mark.parametrize("period", [1, 2, 3, 5, 8, 13, 24, 40, 64])
def test_short_phrase_eight_copies_caught_by_the_hook(period: int) -> None:
    gen, rng = TextGen(seed=period), random.Random(period)
    head = render(gen.tokens(200), rng)
    cycle = [w for w in render(gen.tokens(period * 3), rng).split() if w.isalpha()][:period]
    assert len(cycle) == period
    text = head + " " + " ".join(cycle * 8)
    finding = loop_verdict(text, LoopConfig())
    assert finding is not None and finding.period_tokens == period
    assert loop_verdict(head + " " + " ".join(cycle * 2), LoopConfig()) is None


def test_tokens_roundtrip() -> None:
    # The test generator relies on this: rendering pseudo-tokens and splitting them back agrees.
    gen, rng = TextGen(seed=1), random.Random(1)
    toks = gen.tokens(500)
    assert tokenize(render(toks, rng)) == toks


@pytest.mark.parametrize("chunk", range(8))
def test_injected_loops_every_period(chunk: int) -> None:
    """Periods 1…512, each preceded by random text, tail cut mid-cycle, sometimes mid-word."""
    gen = TextGen(seed=100 + chunk)
    rng = random.Random(chunk)
    for period in range(1 + chunk, 513, 8):
        head = gen.tokens(rng.randint(0, 400))
        cycle = gen.tokens(period)
        copies = loop_copies(period)
        partial = rng.randint(1, period - 1) if period > 1 else 0
        toks = head + cycle * copies + cycle[:partial]
        text = render(toks, rng)
        if rng.random() < 0.5 and len(toks[-1]) > 2 and toks[-1].isalpha():
            text = text[: -(len(toks[-1]) // 2)]  # the stream stopped mid-word
        finding = find_loop(text)
        assert finding is not None, f"period {period} missed"
        assert finding.detector == "periodic-tail"
        assert period % finding.period_tokens == 0, (period, finding)
        assert finding.span_tokens >= copies * period - 1
        assert finding.copies >= 4
        assert len(finding.cycle_hash) == 12
        assert finding.detail["cycle_preview"]
        assert finding.detail["tokens_checked"] > 0


def test_loop_found_whatever_the_head_length() -> None:
    # A loop after a long head, tokenised from the tail only, still reports its whole span.
    gen, rng = TextGen(seed=5), random.Random(5)
    cycle = gen.tokens(37)
    text = render(gen.tokens(6000) + cycle * 200, rng)
    finding = find_loop(text)
    assert finding is not None and finding.period_tokens == 37
    assert finding.span_tokens >= 37 * 200
    assert finding.copies >= 200


@pytest.mark.parametrize(
    "text",
    [
        "the " * 100,
        "Sure. " + "the the the " * 30,
        "x" + "!" * 400,
        "a" * 2000,  # no spaces at all
        "abc" * 700,
        "我们走吧。" * 40,  # CJK has no spaces either
    ],
)
def test_degenerate_loops(text: str) -> None:
    finding = find_loop(text)
    assert finding is not None
    assert finding.detector == "periodic-tail"


def test_short_repetition_is_not_a_loop() -> None:
    gen, rng = TextGen(seed=9), random.Random(9)
    body = render(gen.tokens(300), rng)
    assert find_loop(body + " the the the.") is None
    # A phrase said twice, or three times, is rhetoric; a separator line is layout.
    phrase = render(gen.tokens(30), rng)
    assert find_loop(f"{body} {phrase} {phrase} {phrase}") is None
    assert find_loop(body + "\n\n" + "=" * 120) is None
    assert find_loop(body + "\n" + "|---" * 20 + "|") is None


def test_same_loop_same_hash_whatever_the_phase() -> None:
    gen, rng = TextGen(seed=11), random.Random(11)
    cycle = gen.tokens(20)
    a = find_loop(render(gen.tokens(100) + cycle * 10, rng))
    b = find_loop(render(gen.tokens(77) + cycle[7:] + cycle * 9 + cycle[:3], rng))
    assert a is not None and b is not None
    assert a.cycle_hash == b.cycle_hash


@pytest.mark.parametrize("period", [16, 20, 25, 40, 64, 100, 150, 200, 256, 300, 400, 500])
def test_near_loops_caught_by_ngram(period: int) -> None:
    """One word changes in every copy: not exactly periodic, still a loop.

    About 1/p of the tokens (the changed ones) lie in no repeated 4-gram, so the 0.9 coverage bar
    is met with margin from p ≈ 16 up (p = 10–12 is borderline by design).
    """
    gen, rng = TextGen(seed=period), random.Random(period)
    cycle = gen.tokens(period)
    toks = gen.tokens(300)
    for _ in range(max(4, math.ceil(300 / period)) + 1):
        copy = list(cycle)
        i = rng.randrange(period)
        while (w := gen.word()) == copy[i]:
            pass
        copy[i] = w
        toks += copy
    toks += cycle[: rng.randint(1, period - 1)]
    finding = find_loop(render(toks, rng))
    assert finding is not None, f"near-loop of period {period} missed"
    assert finding.detector == "ngram"
    assert finding.period_tokens == period
    assert finding.detail["score"] >= 0.9
    assert finding.span_tokens >= 200


def test_thresholds_follow_the_config() -> None:
    gen, rng = TextGen(seed=3), random.Random(3)
    cycle = gen.tokens(30)
    text = render(gen.tokens(200) + cycle * 5 + cycle[:4], rng)
    assert find_loop(text) is not None
    assert find_loop(text, min_copies=8) is None
    assert find_loop(text, max_period=20) is None
    assert find_loop(text, min_span_tokens=400) is None
    assert find_loop("") is None


def _manager() -> pluggy.PluginManager:
    return plugin_manager()  # the public testing kit: a fresh manager with the built-ins


def test_hook_through_plugin_manager() -> None:
    pm = _manager()
    looped = "Let me think. " + "I will check the answer again. " * 20
    findings = [f for f in pm.hook.detect_loop(text=looped, output_tokens=140, config=LoopConfig()) if f]
    assert findings and findings[0].detector == "periodic-tail"
    assert findings[0].detail["output_tokens"] == 140
    assert not any(pm.hook.detect_loop(text=looped, output_tokens=140, config=LoopConfig(enabled=False)))
    assert not any(pm.hook.detect_loop(text="A plain answer.", output_tokens=4, config=LoopConfig()))


def test_disabled_returns_none() -> None:
    from infermatrix.plugins.loops import detect_loop

    assert detect_loop(text="the " * 500, output_tokens=500, config=LoopConfig(enabled=False)) is None
    assert detect_loop(text="the " * 500, output_tokens=500, config=LoopConfig()) is not None


def _hook(text: str, output_tokens: int):
    pm = _manager()  # the loops plugin is the built-ins' only detect_loop
    return [f for f in pm.hook.detect_loop(text=text, output_tokens=output_tokens, config=LoopConfig()) if f]


@pytest.mark.parametrize("text", ["", "\n" * 2000, " \t\n" * 700, "\n\n.\n\n" + "\n" * 3000])
def test_thousands_of_tokens_with_nothing_visible_are_a_loop(text: str) -> None:
    """Whitespace, or special tokens the server strips (EOS repeated under ignore_eos): the server counted
    the tokens, the text shows nothing a pseudo-token can repeat."""
    (finding,) = _hook(text, 2000)
    assert finding.detector == "invisible" and finding.span_tokens == 2000
    assert finding.detail["visible_chars"] <= 1


def test_visible_text_and_short_outputs_are_not_invisible() -> None:
    gen = TextGen(3)
    prose = render(gen.tokens(600), random.Random(3))
    assert _hook(prose, 800) == []  # ~4 visible characters per token
    assert _hook("", 100) == []  # too short to judge (a request cut by the window)
    code = "def f(x):\n" + "".join(f"    y{i} = x + {i}\n" for i in range(200))
    assert _hook(code, 2000) == []  # indentation-heavy, still ≥ 1 visible character per 10 tokens
