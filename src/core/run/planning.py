"""Which cells can run, decided before anything is sent (DESIGN §2.2): the matrix against ``max_model_len``
before launch, the capacity the run plans with (config, a plugin's estimate, the engine's own answer), and
over-capacity cells."""

from __future__ import annotations

import pluggy

from infermatrix.core.config import ConfigError, MixedLoadConfig, RunConfig
from infermatrix.core.contexts import format_context
from infermatrix.core.load.mixed_point import mixed_fit_reason, mixed_label
from infermatrix.core.types import Capacity, EngineInfo

__all__ = ["over_capacity_reason", "prefill_target", "over_capacity_cells", "resolve_capacity", "known_max_model_len", "check_mixed_points", "check_matrix"]


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


def resolve_capacity(
    pm: pluggy.PluginManager, cfg: RunConfig, info: EngineInfo, metrics_text: str | None, own: Capacity | None = None
) -> Capacity:
    """Config overrides first, then an ``estimate_capacity`` hook's answer, then the engine's own
    (``own``: ``Engine.read_capacity``), else unlimited — and say which."""
    eng = cfg.engine
    found = pm.hook.estimate_capacity(config=eng, info=info, metrics_text=metrics_text)
    if found is None:
        found = own
    if eng.kv_tokens is not None or eng.max_seqs is not None:
        return Capacity(
            kv_tokens=eng.kv_tokens if eng.kv_tokens is not None else (found.kv_tokens if found else None),
            max_seqs=eng.max_seqs if eng.max_seqs is not None else (found.max_seqs if found else None),
            source="config",
        )
    if found is not None:
        return found
    return Capacity(kv_tokens=None, max_seqs=None, source="unknown: assumed unlimited (the engine did not say, nor the config)")


def known_max_model_len(cfg: RunConfig) -> tuple[int | None, str]:
    """``max_model_len`` as known before anything is launched, and where it comes from."""
    eng = cfg.engine
    if eng.max_model_len is not None:
        return eng.max_model_len, "engine.max_model_len"
    try:
        value = eng.known_max_model_len()
    except ConfigError:
        value = None
    if value is not None:
        return value, f"the {eng.kind} engine's configuration"
    return None, ""


def check_mixed_points(cfg: RunConfig, max_model_len: int | None) -> None:
    """An interference point whose streams cannot fit, as the config alone tells (``known_capacity``): one line before
    launch. The engine's own capacity, read once it is up, marks the point ``over_capacity`` instead (mixed_point.py)."""
    known = cfg.engine.known_capacity()
    capacity = Capacity(kv_tokens=known[0], max_seqs=known[1], source=known[2]) if known is not None else Capacity(kv_tokens=None)
    for i, lc in enumerate(cfg.load):
        if not isinstance(lc, MixedLoadConfig):
            continue
        why = mixed_fit_reason(cfg, lc, capacity, max_model_len)
        if why is not None:
            raise ConfigError(f"load[{i}] ({mixed_label(cfg, lc)}): {why}; fewer decode_streams, shorter contexts or a "
                              "smaller decode_max_output")  # fmt: skip


def check_matrix(cfg: RunConfig) -> None:
    """A matrix that can't run, found before launch: a decode row whose prompt plus output exceeds
    ``max_model_len``. (Prefill rows are capped to fit instead, and said so.)"""
    limit, source = known_max_model_len(cfg)
    m = cfg.matrix
    check_mixed_points(cfg, limit)
    if limit is None:
        return
    bad = [c for c in m.contexts if c + m.max_output > limit]
    if bad:
        rows = ", ".join(format_context(c) for c in bad)
        raise ConfigError(
            f"matrix.contexts: {rows} + {m.max_output} output tokens exceeds max_model_len {limit} ({source}); "
            "lower matrix.contexts or matrix.max_output"
        )
