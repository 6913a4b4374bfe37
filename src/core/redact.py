"""Keep secrets out of everything stored or printed."""

from __future__ import annotations

import shlex

__all__ = ["REDACTED", "redact_argv", "redact_text", "shell_join"]

REDACTED = "<redacted>"
SECRET_FLAGS = ("--api-key", "--api_key", "--token", "--hf-token", "--password", "--secret")


def redact_argv(argv: list[str], secrets: list[str] | tuple[str, ...] = ()) -> list[str]:
    """A copy of ``argv`` with the values of secret flags and any known secret replaced."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if flag in SECRET_FLAGS:
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact_text(arg, secrets))
    return out


def redact_text(text: str, secrets: list[str] | tuple[str, ...] = ()) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return text


def shell_join(argv: list[str]) -> str:
    """A copy-paste command line; ``<redacted>`` stays readable rather than quoted."""
    return " ".join(a if a == REDACTED else shlex.quote(a) for a in argv)
