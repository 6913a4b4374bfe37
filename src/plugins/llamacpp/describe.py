"""What llama-server says about itself, read from its answers: capacity from ``GET /props`` and
``GET /slots``, and the run's ``engine_extra`` from those plus ``/v1/models`` and the command line.

Pure functions over parsed JSON, so they are tested against recorded answers of a real server.
"""

from __future__ import annotations

import re
from typing import Any

from infermatrix.plugin import Capacity

__all__ = ["slot_contexts", "llamacpp_capacity", "describe_llamacpp", "build_number", "REPOSITORY"]

REPOSITORY = "github.com/ggml-org/llama.cpp"


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def slot_contexts(props: dict[str, Any], slots: list[dict[str, Any]] | None) -> list[int]:
    """Each slot's context size: ``/slots`` when it answered, else ``/props``' per-slot ``n_ctx``
    repeated ``total_slots`` times. Empty when neither says."""
    found = [n for n in (_int(s.get("n_ctx")) for s in slots or [] if isinstance(s, dict)) if n]
    if found:
        return found
    n_ctx = _int((props.get("default_generation_settings") or {}).get("n_ctx"))
    total = _int(props.get("total_slots"))
    return [n_ctx] * total if n_ctx and total else []


def llamacpp_capacity(props: dict[str, Any], slots: list[dict[str, Any]] | None, unified: bool | None) -> Capacity | None:
    """KV token budget and sequence limit of a llama-server.

    ``total_slots`` is how many sequences run at once. With a unified KV cache (the default when
    ``-np`` is auto, or ``--kv-unified``) every slot may use the whole pool, so each slot's ``n_ctx``
    *is* the pool; with split caches each slot owns its ``n_ctx`` and the budget is their sum.
    ``unified=None`` (attached: the command line is unknown) reads the pool the unified way, which
    can only under-state the budget, and says so.
    """
    contexts = slot_contexts(props, slots)
    total = _int(props.get("total_slots")) or (len(contexts) or None)
    if not contexts:
        return Capacity(kv_tokens=None, max_seqs=total, source=f"/props total_slots {total}; KV budget unknown") if total else None
    where = "/slots" if slots else "/props default_generation_settings.n_ctx"
    if unified is False:
        kv = sum(contexts)
        how = f"{len(contexts)} slots × n_ctx {contexts[0]:,}" if len(set(contexts)) == 1 else f"sum of {len(contexts)} slots' n_ctx"
        source = f"{where}: {how}, split KV cache (--no-kv-unified / -np)"
    else:
        kv = max(contexts)
        note = "unified KV cache" if unified else "KV cache assumed unified (the command line is unknown)"
        source = f"{where}: n_ctx {kv:,} per slot, {note} shared by {total} slots"
    return Capacity(kv_tokens=kv, max_seqs=total, source=source,
                    detail={"total_slots": total, "slot_n_ctx": contexts, "unified": unified})  # fmt: skip


def build_number(build_info: str | None) -> int | None:
    """``b11434-0c1a2b3`` -> 11434 (llama.cpp versions are build numbers)."""
    m = re.match(r"b?(\d+)", build_info or "")
    return int(m.group(1)) if m else None


def describe_llamacpp(
    props: dict[str, Any], slots: list[dict[str, Any]] | None, model_entry: dict[str, Any], flags: dict[str, Any]
) -> dict[str, Any]:
    """``EngineInfo.extra`` for a llama-server: what ``/props``, ``/slots`` and ``/v1/models`` say, and
    (launched) the typed flags of its command line (``flags``: {} when attached)."""
    meta = model_entry.get("meta") or {}
    contexts = slot_contexts(props, slots)
    build = props.get("build_info")
    launched = bool(flags)
    spec = flags.get("speculative") if launched else None
    speculative_slots = [s.get("speculative") for s in slots or [] if isinstance(s, dict)]
    ngl = flags.get("n_gpu_layers")
    return {
        "repository": REPOSITORY,
        "build_info": build,
        "build_number": build_number(build),
        "total_slots": _int(props.get("total_slots")),
        "slot_n_ctx": contexts[0] if contexts and len(set(contexts)) == 1 else contexts or None,
        "kv_unified": flags.get("unified") if launched else None,
        "ctx_size": flags.get("ctx_size"),
        "flash_attn": flags.get("flash_attn"),
        "n_gpu_layers": ngl,
        "backend": "cpu" if ngl == 0 else None,
        "cache_type_k": flags.get("cache_type_k") or ("f16" if launched else None),
        "cache_type_v": flags.get("cache_type_v") or ("f16" if launched else None),
        "speculative_method": spec or ("none" if launched else None),
        "speculative_draft_model": flags.get("model_draft"),
        "speculative_slots": any(bool(s) for s in speculative_slots) if speculative_slots else None,
        "model_path": props.get("model_path"),
        "model_ftype": props.get("model_ftype"),
        "n_params": _int(meta.get("n_params")),
        "n_ctx_train": _int(meta.get("n_ctx_train")),
        "n_vocab": _int(meta.get("n_vocab")),
        "model_size_bytes": _int(meta.get("size")),
        "endpoint_slots": props.get("endpoint_slots"),
        "endpoint_metrics": props.get("endpoint_metrics"),
    }
