"""docs/writing-a-plugin.md cannot drift from the example package it teaches: its code blocks marked
``<!-- example: FILE -->`` are, in order, exactly the files of docs/examples/toy-engine (every
non-blank line, nothing else), and it has no unmarked Python or TOML blocks."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "writing-a-plugin.md"
EXAMPLE = ROOT / "docs" / "examples" / "toy-engine"
BLOCK = re.compile(r"(?:<!-- example: (?P<file>[\w.\-/]+) -->\n)?```(?P<lang>\w*)\n(?P<code>.*?)```", re.DOTALL)


def _blocks(text: str) -> list[tuple[str | None, str, str]]:
    return [(m["file"], m["lang"], m["code"]) for m in BLOCK.finditer(text)]


def covers(file_text: str, parts: list[str]) -> str | None:
    """Why ``parts`` (in order) are not exactly ``file_text`` up to blank lines between them, or None."""
    pos = 0
    for n, part in enumerate(parts, 1):
        part = part.strip("\n")
        at = file_text.find(part, pos)
        if at < 0:
            return f"block {n} is not in the file (after what the previous blocks showed):\n{part[:300]}"
        if file_text[pos:at].strip():
            return f"lines before block {n} are shown in no block:\n{file_text[pos:at].strip()[:300]}"
        pos = at + len(part)
    if file_text[pos:].strip():
        return f"the end of the file is shown in no block:\n{file_text[pos:].strip()[:300]}"
    return None


def test_tutorial_blocks_are_the_example_files():
    blocks = _blocks(DOC.read_text())
    unmarked = [code[:80] for file, lang, code in blocks if file is None and lang in ("python", "toml", "py")]
    assert not unmarked, f"code blocks not taken from the example package: {unmarked}"
    shown: dict[str, list[str]] = {}
    for file, _, code in blocks:
        if file is not None:
            shown.setdefault(file, []).append(code)
    files = sorted(p.name for p in EXAMPLE.iterdir() if p.is_file() and p.suffix in (".py", ".toml"))
    assert sorted(shown) == files, "every file of the example package is in the tutorial, and nothing else"
    for name, parts in shown.items():
        why = covers((EXAMPLE / name).read_text(), parts)
        assert why is None, f"docs/writing-a-plugin.md and {name} differ: {why}"


def test_the_check_can_fail():
    text = "a = 1\n\nb = 2\n\nc = 3\n"
    assert covers(text, ["a = 1\n", "b = 2\n", "c = 3\n"]) is None
    assert "shown in no block" in covers(text, ["a = 1\n", "c = 3\n"])  # a line left out
    assert "not in the file" in covers(text, ["a = 1\n", "b = 3\n", "c = 3\n"])  # a line changed
    assert covers(text, ["b = 2\n", "a = 1\n", "c = 3\n"]) is not None  # out of order
    assert "end of the file" in covers(text, ["a = 1\n", "b = 2\n"])
