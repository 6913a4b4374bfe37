"""What a task's output answered, and whether it is right (docs/metrics.md, "Task accuracy").

* An exact ``answer``: the extracted answer is the text after the LAST ``Answer:`` (or GSM8K's ``####``) in the
  output, to the end of its line; without one, for a numeric answer, the output's last number. Right when both,
  normalised (case, surrounding quotes and markup, a final full stop, spaces, thousands commas, ``42.0`` = ``42``),
  are equal.
* A ``regex``: right when it matches the output anywhere (``re.search``); the extracted answer is its first group,
  else the whole match. The reference tool's ``--correct-regex`` judges so too.

The output is the whole streamed text, reasoning included: the last ``Answer:`` is the final one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Judged", "judge", "extract_answer", "normalize"]

_MARK = re.compile(r"(?:answer\s*[:：]|####)", re.I)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_NUMERIC = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass(frozen=True)
class Judged:
    extracted: str | None
    correct: bool


def normalize(s: str) -> str:
    s = " ".join(s.strip(" \t*`_\"'$").rstrip(".").strip(" \t*`_\"'$").split()).casefold()  # markup, quotes, a full stop
    plain = s.replace(",", "") if _NUMBER.fullmatch(s) else s
    if _NUMERIC.fullmatch(plain):
        num = float(plain)
        return str(int(num)) if num.is_integer() else repr(num)
    return s


def extract_answer(text: str, expected: str | None = None) -> str | None:
    marks = [text[m.end():].split("\n", 1)[0].strip() for m in _MARK.finditer(text)]  # each mark's rest of line
    marks = [m for m in marks if m]
    if marks:
        return marks[-1]
    if expected is not None and _NUMERIC.fullmatch(normalize(expected)):
        numbers = _NUMBER.findall(text)
        return numbers[-1] if numbers else None
    return None


def judge(text: str, answer: str | None = None, regex: str | None = None) -> Judged:
    """The task's output judged by its answer or its regex (exactly one is given)."""
    if regex is not None:
        m = re.search(regex, text)
        if m is None:
            return Judged(None, False)
        return Judged(m.group(1) if m.groups() else m.group(0), True)
    extracted = extract_answer(text, answer)
    return Judged(extracted, extracted is not None and answer is not None and normalize(extracted) == normalize(answer))
