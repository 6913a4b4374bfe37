"""Built-in loop detector (DESIGN §2.7): does one request's output end in a repeated cycle?

We only have the output *text* (not the server's token ids), so the text is split into
whitespace-normalised pseudo-tokens (words and single punctuation marks) and two detectors run
on its tail:

* ``periodic-tail``: the tail is an exact repetition of a p-token cycle (a partial last copy is
  fine), for at least ``min_copies`` copies and ``min_span_tokens`` tokens. Exact loops are what
  greedy decoding falls into, and what inflates speculative-decoding numbers the most.
* ``ngram``: almost every token of the tail lies in a 4-gram that occurs again nearby. This
  catches near-loops (a number or a word changes from copy to copy) that are not exactly periodic.

Periods and spans are counted in pseudo-tokens, which are close to, but not, server tokens.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter

from infermatrix.plugin import LoopConfig, LoopFinding, hookimpl

__all__ = ["detect_loop", "find_loop", "tokenize", "invisible_output"]

# CJK ideographs and kana are written without spaces: one pseudo-token per character, or a looping
# Chinese sentence would be a single "word". Other word runs are capped at 16 characters so that a
# run like "aaaa…" or "abcabc…" with no spaces still shows up as a periodic token sequence.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN_RE = re.compile(rf"[{_CJK}]|[^\W{_CJK}]{{1,16}}|[^\w\s]")
_WORD_RE = re.compile(r"\w")
_SPACE_RE = re.compile(r"\s")

# Tokens at the very end that may break the cycle: the output was cut mid-word or mid-character
# (max_tokens ends a stream anywhere), so the last pseudo-token or two can be a fragment.
END_SLACK = 3
# Before comparing a whole candidate span, compare this many tokens: random text fails here, and
# slicing a 2,000-token span for every candidate period would dominate the cost.
PRECHECK = 8
# A cycle of punctuation only ("=====", "-|-|") is how separator lines and table rules look, so it
# must span this many times the usual minimum before it counts as a loop ("......" forever does).
PUNCT_SPAN_FACTOR = 4
# Near-loop detector: n-gram size, shortest tail it judges, share of tail tokens that must lie in
# a repeated n-gram. 0.9 leaves room for one changed word in every ~10-token copy, while prose,
# code and tables (a few % to ~60 %) stay well below it.
NGRAM_N = 4
NGRAM_MIN_SPAN = 200
NGRAM_SCORE = 0.9
# A repeated n-gram covers at most N tokens, so a 0.9 coverage needs at least 0.9/N of the tail's
# n-grams repeated; below that the per-token pass is skipped (most texts stop here).
_NGRAM_PREFILTER = NGRAM_SCORE / NGRAM_N


def tokenize(text: str, pos: int = 0) -> list[str]:
    """Pseudo-tokens of ``text[pos:]``: words (≤ 16 chars), CJK characters, punctuation marks."""
    return _TOKEN_RE.findall(text, pos)


def _required_span(period: int, min_copies: float, min_span_tokens: int) -> int:
    # Short periods need many copies (p = 2 needs 32 copies at the default 64-token span), long
    # ones need min_copies copies: so a 64-token phrase said twice is never a loop.
    return max(min_span_tokens, math.ceil(min_copies * period))


def _tail_tokens(text: str, need: int) -> tuple[list[str], bool]:
    """The last ``need``+ pseudo-tokens (or all of them), and whether the text was cut."""
    chars = need * 8
    while chars < len(text):
        # Start at a whitespace, where the whole text's tokens also break, so the tail's tokens
        # are exactly the last tokens of the whole text (not the back half of a word).
        pos = len(text) - chars
        space = _SPACE_RE.search(text, pos, pos + 256)
        toks = tokenize(text, space.start()) if space else tokenize(text, pos)[1:]
        if len(toks) >= need:
            return toks, True
        chars *= 4
    return tokenize(text), False


def _periodic_tail(
    toks: list[str], min_period: int, max_period: int, min_copies: float, min_span: int
) -> tuple[int, int, int, int] | None:
    """Smallest period whose exact repetition covers the tail: (period, start, end, slack) or None.

    Anchor search: a p-periodic tail ending at index e has toks[e] == toks[e - p], so the earlier
    occurrences of the last token give every candidate period. Candidates are tried nearest first
    (smallest p), which yields the fundamental period (Fine–Wilf: a long enough span with periods
    p and q also has period gcd(p, q)).
    """
    n = len(toks)
    for slack in range(min(END_SLACK, n - 1) + 1):
        e = n - 1 - slack
        end = e + 1
        lo, hi = max(0, e - max_period), e - min_period
        if hi < lo:
            continue
        anchor = toks[e]
        window = toks[lo : hi + 1]
        found: list[int] = []
        i = -1
        try:
            while True:
                i = window.index(anchor, i + 1)
                found.append(lo + i)
        except ValueError:
            pass
        for j in reversed(found):
            p = e - j
            need = _required_span(p, min_copies, min_span)
            if need > end:
                break  # larger periods need even more text
            m = need - p  # positions that must equal the token p earlier
            k = min(PRECHECK, m)
            if toks[end - k : end] != toks[end - k - p : end - p]:
                continue
            if toks[end - m : end] != toks[end - m - p : end - p]:
                continue
            start = end - need
            while start > 0 and toks[start - 1] == toks[start - 1 + p]:
                start -= 1
            punct_only = not any(_WORD_RE.search(t) for t in toks[e - p + 1 : end])
            if punct_only and end - start < need * PUNCT_SPAN_FACTOR:
                continue
            return p, start, e, slack
    return None


def _canonical(cycle: list[str]) -> list[str]:
    """The cycle's least rotation, so the same loop hashes alike whatever phase it was cut at."""
    first = min(cycle)
    starts = [i for i, t in enumerate(cycle) if t == first]
    i = min(starts, key=lambda s: cycle[s:] + cycle[:s])
    return cycle[i:] + cycle[:i]


def _cycle_hash(cycle: list[str]) -> str:
    return hashlib.sha1(" ".join(_canonical(cycle)).encode()).hexdigest()[:12]


def _ngram_tail(
    toks: list[str], min_period: int, max_period: int, min_copies: float, min_span: int
) -> tuple[int, int, float] | None:
    """Near-loop at the tail: (period, span, score) or None.

    A token is *covered* when some n-gram containing it occurs at least twice in the tail region
    (the last ``min_copies * max_period`` tokens or so). The span is the longest suffix whose
    tokens are ≥ NGRAM_SCORE covered; the period is the commonest distance between consecutive
    occurrences of the same n-gram inside it. The span must hold ``min_copies`` periods, so a
    paragraph quoted once, far back, is not a loop.
    """
    base = max(NGRAM_MIN_SPAN, min_span)
    region = max(base, math.ceil(min_copies * max_period) + NGRAM_N)
    win = toks[-region:]
    n = len(win)
    if n < base:
        return None
    grams = list(zip(*(win[i:] for i in range(NGRAM_N))))
    counts = Counter(grams)
    tail = grams[-(base - NGRAM_N + 1) :]
    # sum(count - 1) bounds the number of repeated n-grams from above, and map() keeps it in C.
    if sum(map(counts.__getitem__, tail)) - len(tail) < _NGRAM_PREFILTER * len(tail):
        return None
    covered = [False] * n
    for s, g in enumerate(grams):
        if counts[g] > 1:
            covered[s : s + NGRAM_N] = (True,) * NGRAM_N
    # Longest suffix with at most (1 - NGRAM_SCORE) of its tokens uncovered.
    span, uncovered = 0, 0
    for w in range(1, n + 1):
        uncovered += not covered[n - w]
        if w >= base and uncovered <= (1.0 - NGRAM_SCORE) * w:
            span = w
    if not span:
        return None
    first = n - span
    last_seen: dict[tuple[str, ...], int] = {}
    gaps: Counter[int] = Counter()
    for s, g in enumerate(grams):
        if counts[g] > 1:
            prev = last_seen.get(g)
            if prev is not None and s >= first:
                gaps[s - prev] += 1
            last_seen[g] = s
    if not gaps:
        return None
    period = gaps.most_common(1)[0][0]
    if not (min_period <= period <= max_period) or span < min_copies * period:
        return None
    score = 1.0 - sum(not c for c in covered[first:]) / span
    return period, span, score


def find_loop(
    text: str,
    *,
    min_period: int = 1,
    max_period: int = 512,
    min_copies: float = 4.0,
    min_span_tokens: int = 64,
) -> LoopFinding | None:
    """Evidence that ``text`` ends in a loop, or ``None``. Periods and spans are in pseudo-tokens."""
    if not text or max_period < min_period:
        return None
    need = max(
        _required_span(max_period, min_copies, min_span_tokens) + END_SLACK + 1,
        max(NGRAM_MIN_SPAN, min_span_tokens, math.ceil(min_copies * max_period) + NGRAM_N),
    )
    toks, cut = _tail_tokens(text, need)
    hit = _periodic_tail(toks, min_period, max_period, min_copies, min_span_tokens)
    if hit is not None:
        p, start, e, slack = hit
        if start == 0 and cut:
            # The cycle runs past the part we tokenised: measure its full extent on the whole text.
            full = tokenize(text)
            shift = len(full) - len(toks)
            start, e = start + shift, e + shift
            while start > 0 and full[start - 1] == full[start - 1 + p]:
                start -= 1
            toks = full
        span = e - start + 1
        cycle = toks[start : start + p]
        return LoopFinding(
            detector="periodic-tail",
            period_tokens=p,
            copies=round(span / p, 2),
            span_tokens=span,
            cycle_hash=_cycle_hash(cycle),
            detail={
                "cycle_preview": " ".join(cycle)[:80],
                "tokens_checked": len(toks),
                "tail_slack": slack,
                "token_unit": "pseudo",
            },
        )
    near = _ngram_tail(toks, min_period, max_period, min_copies, min_span_tokens)
    if near is not None:
        p, span, score = near
        cycle = toks[len(toks) - span : len(toks) - span + p]
        return LoopFinding(
            detector="ngram",
            period_tokens=p,
            copies=round(span / p, 2),
            span_tokens=span,
            cycle_hash=_cycle_hash(cycle),
            detail={
                "cycle_preview": " ".join(cycle)[:80],
                "tokens_checked": len(toks),
                "score": round(score, 4),
                "ngram": NGRAM_N,
                "token_unit": "pseudo",
            },
        )
    return None


# The second, copy-count rule of the hook (see detect_loop).
SHORT_LOOP_MAX_PERIOD = 64
SHORT_LOOP_COPIES = 8.0
SHORT_LOOP_MIN_SPAN = 8  # 8 copies of a 1-token phrase


def loop_verdict(text: str, config: LoopConfig) -> LoopFinding | None:
    """Both rules the hook applies: ``find_loop`` with the config, then the copy-count rule for short phrases."""
    finding = find_loop(
        text,
        min_period=config.min_period,
        max_period=config.max_period,
        min_copies=config.min_copies,
        min_span_tokens=config.min_span_tokens,
    )
    if finding is None:
        # A short phrase repeated many times ("a period of <= 64 tokens repeated >= 8 times") can span fewer
        # than min_span_tokens: accept it on the strength of its copies alone.
        finding = find_loop(
            text,
            min_period=config.min_period,
            max_period=min(config.max_period, SHORT_LOOP_MAX_PERIOD),
            min_copies=max(config.min_copies, SHORT_LOOP_COPIES),
            min_span_tokens=SHORT_LOOP_MIN_SPAN,
        )
    return finding


# The third rule: output the text cannot show. A model stuck on whitespace, or on special tokens the
# server strips from the text (an end-of-sequence token repeated under ignore_eos), produces thousands of
# server tokens and (almost) nothing a pseudo-token can see. Judged by the server's token count against
# the visible characters: below one non-whitespace character per INVISIBLE_TOKENS_PER_CHAR tokens, over
# at least INVISIBLE_MIN_TOKENS tokens (and the loop span), the output is a loop. Ordinary text has
# ~3–5 visible characters per token, code and CJK at least ~1.
INVISIBLE_TOKENS_PER_CHAR = 10
INVISIBLE_MIN_TOKENS = 256


def invisible_output(text: str, output_tokens: int, config: LoopConfig) -> LoopFinding | None:
    """A finding when ``output_tokens`` server tokens carried (almost) no visible text, else None."""
    if output_tokens < max(INVISIBLE_MIN_TOKENS, config.min_span_tokens):
        return None
    visible = len(text) - sum(1 for c in text if c.isspace()) if text else 0
    if visible * INVISIBLE_TOKENS_PER_CHAR >= output_tokens:
        return None
    shape = "".join(sorted(set(text)))[:16]  # which invisible characters (or none): the "cycle"
    return LoopFinding(
        detector="invisible",
        period_tokens=1,
        copies=float(output_tokens),
        span_tokens=output_tokens,
        cycle_hash=hashlib.sha1(shape.encode()).hexdigest()[:12],
        detail={"visible_chars": visible, "text_chars": len(text), "output_tokens": output_tokens,
                "cycle_preview": repr(shape), "token_unit": "server"},
    )  # fmt: skip


@hookimpl
def detect_loop(text: str, output_tokens: int, config: LoopConfig) -> LoopFinding | None:
    """The ``detect_loop`` hook: ``loop_verdict`` with the ``[loops]`` settings, then ``invisible_output``
    (``output_tokens`` is the server's count of the request's tokens)."""
    if not config.enabled:
        return None
    finding = loop_verdict(text, config) if text else None
    if finding is None:
        return invisible_output(text, output_tokens, config)
    finding.detail["output_tokens"] = output_tokens  # server tokens, to relate pseudo-token spans
    return finding
