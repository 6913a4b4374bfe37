"""``[engine] kind = "llamacpp"``: which GGUF to serve, how to start ``llama-server``, and its flags.

The common ``llama-server`` flags are typed fields of ``[engine.args]`` (a typo is a config error,
not a server that dies at start-up); anything else goes verbatim in ``args.extra_args``. The command
line is built in a fixed order: ``-m MODEL``, ``--alias``, ``--host``/``--port``/``--api-key``,
``--metrics``, the typed flags in declaration order, then ``extra_args``.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, model_validator

from infermatrix.plugin import EngineConfig, Strict

__all__ = ["LlamaCppArgs", "LlamaCppEngineConfig", "expand_path"]

# Typed field -> llama-server flag (the short forms users know from llama.cpp's README).
_FLAGS: dict[str, str] = {
    "ctx_size": "-c",
    "parallel": "-np",
    "kv_unified": "--kv-unified",
    "flash_attn": "-fa",
    "n_gpu_layers": "-ngl",
    "threads": "-t",
    "batch_size": "-b",
    "ubatch_size": "-ub",
    "cache_type_k": "-ctk",
    "cache_type_v": "-ctv",
    "cache_reuse": "--cache-reuse",
    "model_draft": "-md",
    "spec_type": "--spec-type",
    "spec_draft_n_max": "--spec-draft-n-max",
    "spec_draft_n_min": "--spec-draft-n-min",
    "n_gpu_layers_draft": "-ngld",
    "seed": "--seed",
    "slot_save_path": "--slot-save-path",
}
# Booleans llama-server declares as a flag pair: False is said explicitly with the negative form.
_NEGATIVE = {"kv_unified": "--no-kv-unified"}


class LlamaCppArgs(Strict):
    """Typed ``llama-server`` flags; ``None`` (the default) leaves llama.cpp's own default."""

    ctx_size: int | None = Field(None, ge=0, description="-c: KV cache size in tokens, shared or split over the slots (0 = the model's)")
    parallel: int | None = Field(None, gt=0, description="-np: slots (sequences at once); unset = auto (4 slots, unified KV cache)")
    kv_unified: bool | None = Field(None, description="--kv-unified / --no-kv-unified: one KV pool for all slots (default: on when -np is auto)")
    flash_attn: Literal["on", "off", "auto"] | None = Field(None, description="-fa")
    n_gpu_layers: int | Literal["auto", "all"] | None = Field(None, description="-ngl: layers offloaded to the GPU")
    threads: int | None = Field(None, gt=0, description="-t: CPU threads for generation")
    batch_size: int | None = Field(None, gt=0, description="-b: logical batch size")
    ubatch_size: int | None = Field(None, gt=0, description="-ub: physical batch size")
    cache_type_k: str | None = Field(None, description="-ctk: KV cache type for K (f16, q8_0 ...)")
    cache_type_v: str | None = Field(None, description="-ctv: KV cache type for V")
    cache_reuse: int | None = Field(None, ge=0, description="--cache-reuse: min chunk size to reuse from the cache via KV shifting")
    model_draft: str | None = Field(None, description="-md: draft model (GGUF) for speculative decoding")
    spec_type: str | None = Field(None, description="--spec-type: speculative decoding type(s), comma-separated")
    spec_draft_n_max: int | None = Field(None, ge=0, description="--spec-draft-n-max: tokens to draft")
    spec_draft_n_min: int | None = Field(None, ge=0, description="--spec-draft-n-min")
    n_gpu_layers_draft: int | Literal["auto", "all"] | None = Field(None, description="-ngld: draft model layers on the GPU")
    seed: int | None = Field(None, description="--seed: the server's RNG seed")
    slot_save_path: str | None = Field(
        None, description="--slot-save-path: enables the slot actions (erase, save, restore); default: the run's directory/slots"
    )
    extra_args: list[str] = Field(default_factory=list, description="further arguments, verbatim, after the typed ones")

    def flags(self) -> list[str]:
        out: list[str] = []
        for name, flag in _FLAGS.items():
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool):
                out.append(flag if value else _NEGATIVE[name])
            else:
                out += [flag, expand_path(value) if name in ("model_draft", "slot_save_path") else str(value)]
        return out + self.extra_args

    def unified_kv(self) -> bool:
        """Whether the slots share one KV pool: llama-server's rule (explicit flag, else auto -np)."""
        return self.kv_unified if self.kv_unified is not None else self.parallel is None

    def speculative(self) -> str | None:
        """The speculative method the flags ask for, in words; ``None`` when there is none."""
        if self.spec_type:
            return self.spec_type
        return "draft" if self.model_draft else None


class LlamaCppEngineConfig(EngineConfig):
    """Launch ``llama-server -m MODEL_SOURCE …`` (or attach with ``base_url``)."""

    kind: Literal["llamacpp"] = "llamacpp"
    model_source: str | None = Field(None, description="the GGUF file llama-server loads (-m); `model` is the served name (--alias)")
    executable: str = Field("llama-server", description="the llama-server binary (default: llama-server on PATH)")
    host: str = Field("127.0.0.1", description="--host; 0.0.0.0 serves every interface (infermatrix connects on 127.0.0.1)")
    port: int | None = Field(None, gt=0, lt=65536, description="--port; a free port when omitted")
    args: LlamaCppArgs = Field(default_factory=LlamaCppArgs)
    env: dict[str, str] = Field(default_factory=dict, description="environment variables for the server")

    @model_validator(mode="after")
    def _check(self) -> LlamaCppEngineConfig:
        if not self.base_url and not self.model_source:
            raise ValueError("engine.model_source (a GGUF file) is required to launch llama-server (or give engine.base_url to attach)")
        return self


def expand_path(value: str) -> str:
    """``~`` and ``$VARS`` expanded, as a shell would."""
    return os.path.expanduser(os.path.expandvars(value))
