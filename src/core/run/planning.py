"""Which cells can run: over-capacity planning before anything is sent (DESIGN §2.2)."""

from __future__ import annotations

from infermatrix.core.contexts import format_context
from infermatrix.core.types import Capacity

__all__ = ["over_capacity_reason", "prefill_target", "over_capacity_cells"]


def over_capacity_reason(
    context: int, n: int, max_output: int, capacity: Capacity, max_model_len: int | None, prompt_mode: str
) -> str | None:
    """Why cell (context, n) can't fit the server, or ``None`` if it can."""
    if max_model_len is not None and context + max_output > max_model_len:
        return f"{format_context(context)} + {max_output} output tokens exceeds max_model_len {max_model_len}"
    if capacity.max_seqs is not None and n > capacity.max_seqs:
        return f"{n} requests exceed the server's max sequences {capacity.max_seqs}"
    if capacity.kv_tokens is not None:
        # Distinct prompts each hold their own KV; a shared prompt's KV is held once.
        need = n * (context + max_output) if prompt_mode == "distinct" else context + n * max_output
        if need > capacity.kv_tokens:
            return f"needs {need:,} KV tokens, the server holds {capacity.kv_tokens:,} ({capacity.source})"
    return None


def prefill_target(context: int, max_model_len: int | None) -> tuple[int, str | None]:
    """The prompt length a prefill probe can use: a prompt plus one output token must fit the model."""
    if max_model_len is not None and context + 1 > max_model_len:
        target = max_model_len - 1
        return target, f"prompt capped at {target:,} tokens so one output token fits max_model_len {max_model_len:,}"
    return context, None


def over_capacity_cells(
    cells: list[tuple[int, int]], max_output: int, capacity: Capacity, max_model_len: int | None, prompt_mode: str
) -> list[tuple[int, int]]:
    """The cells of ``cells`` that can't run on ``capacity`` (the plan shown before launch)."""
    return [(c, n) for c, n in cells if over_capacity_reason(c, n, max_output, capacity, max_model_len, prompt_mode)]
