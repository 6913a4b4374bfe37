"""Which prompts are still warm (core/measure/warmth.py): the conservative KV rule."""

from __future__ import annotations

from infermatrix.core.measure.warmth import WarmCache
from infermatrix.core.types import Prompt


def p(name: str, tokens: int = 1000) -> Prompt:
    return Prompt(text=name, tokens=tokens, key=name)


def test_unknown_capacity_warms_everything_again():
    w = WarmCache(None)
    w.sent([p("a")])
    assert w.cold([p("a"), p("b")]) == [True, True]


def test_sent_prompt_is_warm_while_what_came_after_fits():
    w = WarmCache(10_000)
    a, b, c = p("a"), p("b"), p("c")
    assert w.cold([a]) == [True]
    w.sent([a], [True], outputs=1)
    w.sent([a], [False], outputs=3 * 256)  # the cell: a's outputs count against it (conservative)
    assert w.cold([a, b]) == [False, True]  # 769 written since a + b's 1000 cold + a's 1000 <= 10,000
    w.sent([a, b], [False, True], outputs=2)
    w.wrote(8_000)  # e.g. prefill probes
    # since a's last touch: b's warm-up output 2 + 8,000 probes; with c cold (1000) and a itself: 10,002 > 10,000
    assert w.cold([a, c]) == [True, True]


def test_cold_prompts_of_the_cell_can_push_out_a_warm_one():
    w = WarmCache(2_500)
    w.sent([p("a")], outputs=0)
    assert w.cold([p("a"), p("b")]) == [False, True]  # 1000 (b) + 1000 (a) <= 2500
    assert w.cold([p("a"), p("b"), p("c")]) == [True, True, True]  # 2000 cold + a > 2500: a must be warmed too


def test_a_repeated_prompt_is_warmed_once():
    w = WarmCache(100_000)
    shared = p("shared")
    assert w.cold([shared, shared, shared]) == [True, False, False]


def test_restart_forgets():
    w = WarmCache(100_000)
    w.sent([p("a")])
    w.forget()
    assert w.cold([p("a")]) == [True]


def test_a_prompt_the_engine_did_not_answer_is_warmed_again():
    """A rejected or failed send holds nothing in the cache: the next cell warms it, even with room to spare."""
    w = WarmCache(100_000)
    a, b = p("a"), p("b")
    w.sent([a], [True], outputs=0, answered=[False])  # a's warm-up failed (HTTP 503)
    assert w.cold([a, b]) == [True, True]
    w.sent([a, b], [True, True], outputs=1, answered=[True, False])
    assert w.cold([a, b]) == [False, True]
    w.sent([a, b], [False, True], outputs=10, answered=[False, True])  # the window: a's stream never got a first token
    assert w.cold([a, b]) == [True, False]
