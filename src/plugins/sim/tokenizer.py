"""The sim's tokenizer: deterministic, regex-based, shaped like a byte-level BPE pre-tokenizer.

A token is a run of 1-6 letters with an optional leading space, a single digit or punctuation mark
(optionally after a space), or whitespace. Every character belongs to exactly one token, so the
tokens of a text concatenate back to it, and the generated words (lowercase, at most 6 letters,
each sent with a leading space) are exactly one token each: tokenizing a request's concatenated
output gives exactly the number of tokens the server says it emitted.

Chat template (ChatML-like): every message costs its content tokens plus ``MESSAGE_OVERHEAD`` (4:
``<|im_start|>``, the role, a newline, ``<|im_end|>``), and the assistant priming adds
``PRIMING_OVERHEAD`` (3: ``<|im_start|>``, ``assistant``, a newline). ``/tokenize`` with messages
and the chat endpoint's ``prompt_tokens`` both use :func:`chat_tokens`.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from typing import Any, Iterable

__all__ = [
    "VOCAB_SIZE",
    "MESSAGE_OVERHEAD",
    "PRIMING_OVERHEAD",
    "split",
    "use_tokenizer_file",
    "count_tokens",
    "tokenize",
    "token_id",
    "chat_tokens",
    "message_text",
]

VOCAB_SIZE = 151_936  # Qwen-sized, so ids look plausible
MESSAGE_OVERHEAD = 4
PRIMING_OVERHEAD = 3

# Order matters: words before the catch-alls. ``\s+(?!\S)`` leaves the last space of a run to the
# next word, as GPT-2's pattern does, so "a  b" is ["a", " ", " b"].
_TOKEN_RE = re.compile(r" ?[A-Za-z]{1,6}| ?[0-9]| ?[^\sA-Za-z0-9]|\s+(?!\S)|\s")

# Special tokens get fixed ids at the top of the vocabulary, like real chat tokenizers.
_SPECIAL = {"<|im_start|>": VOCAB_SIZE - 3, "<|im_end|>": VOCAB_SIZE - 2, "<|endoftext|>": VOCAB_SIZE - 1}
_ID_CACHE: dict[str, int] = {}


# A real tokenizer (``tokenizers``, from the profile's ``tokenizer_file``) replacing the regex one in this
# server process: so the sim counts prompts as a real model does, for a client that sizes them with the
# same tokenizer.json and no /tokenize (docs/sim.md). One profile per server process, so module state.
_FILE: Any = None


def use_tokenizer_file(path: str | None) -> None:
    """Count with ``path`` (a tokenizer.json, or a model directory holding one); None: the regex tokenizer."""
    global _FILE
    if path is None:
        _FILE = None
        return
    from tokenizers import Tokenizer

    p = Path(path).expanduser()
    _FILE = Tokenizer.from_file(str(p / "tokenizer.json" if p.is_dir() else p))


def split(text: str) -> list[str]:
    """The token strings of ``text`` (with the regex tokenizer they concatenate back to ``text``)."""
    if _FILE is not None:
        return list(_FILE.encode(text).tokens)
    return _TOKEN_RE.findall(text)


def count_tokens(text: str) -> int:
    return len(split(text))


def token_id(piece: str) -> int:
    """A stable id for a token string (crc32, not ``hash()``, so it is the same in every process)."""
    tid = _ID_CACHE.get(piece)
    if tid is None:
        tid = _SPECIAL.get(piece)
        if tid is None:
            tid = zlib.crc32(piece.encode()) % (VOCAB_SIZE - len(_SPECIAL))
        if len(_ID_CACHE) < 1_000_000:  # token strings are few; the cap only guards odd inputs
            _ID_CACHE[piece] = tid
    return tid


def tokenize(text: str) -> list[int]:
    return [token_id(p) for p in _TOKEN_RE.findall(text)]


def message_text(content: Any) -> str:
    """A message's text: a string, or the text parts of an OpenAI content-part list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text")
    return str(content)


def chat_tokens(messages: Iterable[dict[str, Any]]) -> list[str]:
    """The token strings of the chat template applied to ``messages``, with the assistant priming."""
    out: list[str] = []
    for m in messages:
        out.append("<|im_start|>")
        out.append(str(m.get("role", "user")))  # the role is one token whatever its spelling
        out.append("\n")
        out.extend(split(message_text(m.get("content"))))
        out.append("<|im_end|>")
    out.extend(("<|im_start|>", "assistant", "\n"))
    return out
