"""The built-in task set: multi-step arithmetic and string tasks made from a seed, each with its exact answer
(nothing downloaded), and ``solve`` — the answer a prompt of this set asks for, computed from the prompt text
alone (the sim answers with it; a test can check any stored answer with it).

Each statement has one fixed phrasing (the regexes below), so ``solve`` parses what ``make_tasks`` wrote and
nothing else: text that is not a built-in task gets ``None``.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

__all__ = ["Task", "BUILTIN_SET", "KINDS", "ANSWER_INSTRUCTION", "make_tasks", "solve"]

BUILTIN_SET = "builtin"
KINDS = ("arith", "count", "reverse", "sort")
ANSWER_INSTRUCTION = "Think step by step, then give the final answer on the last line as 'Answer: <answer>'."

_WORDS = ("planet", "river", "garden", "silver", "window", "butter", "marble", "pepper", "candle", "forest", "banana",
          "letter", "mirror", "rabbit", "sunset", "bottle", "carpet", "dragon", "puzzle", "summer", "strawberry",
          "mississippi", "balloon", "committee", "bookkeeper", "parallel", "assessment", "coffee", "kitten", "yellow")  # fmt: skip

_ARITH = re.compile(r"Start with (-?\d+)\.((?: (?:Add|Subtract|Multiply by) -?\d+\.)+) What number do you end with\?")
_STEP = re.compile(r"(Add|Subtract|Multiply by) (-?\d+)\.")
_COUNT = re.compile(r"How many times does the letter '([a-z])' appear in '([a-z]+)'\?")
_REVERSE = re.compile(r"Write the word '([a-z]+)' backwards\.")
_SORT = re.compile(r"Sort these words alphabetically: ([a-z]+(?:, [a-z]+)+)\.")


@dataclass(frozen=True)
class Task:
    """One task: its prompt and how it is judged — an exact ``answer`` or a ``regex`` the output must match."""

    id: str
    prompt: str
    answer: str | None = None
    regex: str | None = None
    kind: str = ""  # arith | count | reverse | sort (built-in), file (a user's task file)
    task_set: str = BUILTIN_SET  # "builtin", or the task file's name


def _arith(rng: random.Random) -> tuple[str, str]:
    value = rng.randint(2, 30)
    text = f"Start with {value}."
    for _ in range(rng.randint(3, 5)):
        op = rng.choice(("Add", "Subtract", "Multiply by"))
        n = rng.randint(2, 9) if op == "Multiply by" else rng.randint(2, 40)
        value = value + n if op == "Add" else value - n if op == "Subtract" else value * n
        text += f" {op} {n}."
    return text + " What number do you end with?", str(value)


def _count(rng: random.Random) -> tuple[str, str]:
    word = rng.choice(_WORDS)
    letter = rng.choice(sorted(set(word)))
    return f"How many times does the letter '{letter}' appear in '{word}'?", str(word.count(letter))


def _reverse(rng: random.Random) -> tuple[str, str]:
    word = rng.choice(_WORDS)
    return f"Write the word '{word}' backwards.", word[::-1]


def _sort(rng: random.Random) -> tuple[str, str]:
    words = rng.sample(_WORDS, rng.randint(3, 5))
    return f"Sort these words alphabetically: {', '.join(words)}.", ", ".join(sorted(words))


_MAKERS = {"arith": _arith, "count": _count, "reverse": _reverse, "sort": _sort}


def make_tasks(seed: int, n: int, kinds: tuple[str, ...] = KINDS) -> list[Task]:
    """``n`` tasks drawn from ``kinds`` in turn, the same for the same seed (the same tasks: compare pairs them)."""
    rng = random.Random(f"infermatrix-tasks-{seed}")
    out = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        statement, answer = _MAKERS[kind](rng)
        out.append(Task(f"{BUILTIN_SET}-{seed}-{i}", f"Task {i + 1}: {statement}\n{ANSWER_INSTRUCTION}", answer, kind=kind))
    return out


def solve(text: str) -> str | None:
    """The answer the last built-in task statement in ``text`` asks for; None when ``text`` holds none."""
    found: list[tuple[int, str]] = []
    for m in _ARITH.finditer(text):
        value = int(m.group(1))
        for op, n in _STEP.findall(m.group(2)):
            value = value + int(n) if op == "Add" else value - int(n) if op == "Subtract" else value * int(n)
        found.append((m.start(), str(value)))
    found += [(m.start(), str(m.group(2).count(m.group(1)))) for m in _COUNT.finditer(text)]
    found += [(m.start(), m.group(1)[::-1]) for m in _REVERSE.finditer(text)]
    found += [(m.start(), ", ".join(sorted(m.group(1).split(", ")))) for m in _SORT.finditer(text)]
    return max(found)[1] if found else None
