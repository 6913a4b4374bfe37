"""``[engine] kind = "sglang"``: what to serve, how to start SGLang, and its flags.

SGLang's server flags use dashes (``--model-path``, ``--mem-fraction-static``); the common ones are
typed fields of ``[engine.args]``, anything else goes verbatim in ``args.extra_args``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from infermatrix.plugin import EngineConfig, Strict

__all__ = ["SglangArgs", "SglangEngineConfig", "SERVER_MODULE"]

# `python -m sglang.launch_server` works in every release; newer ones also have `sglang serve`.
SERVER_MODULE = "sglang.launch_server"


class SglangArgs(Strict):
    """Typed SGLang server flags, emitted in this order; ``None`` leaves SGLang's own default."""

    tp: int | None = Field(None, gt=0, description="--tp: tensor-parallel size")
    dp: int | None = Field(None, gt=0, description="--dp: data-parallel size (capacity is summed over the DP ranks)")
    ep_size: int | None = Field(None, gt=0, description="--ep-size: expert-parallel size")
    enable_dp_attention: bool | None = None
    context_length: int | None = Field(None, gt=0)
    max_running_requests: int | None = Field(None, gt=0)
    max_total_tokens: int | None = Field(None, gt=0, description="KV-cache tokens (debugging; normally derived from memory)")
    mem_fraction_static: float | None = Field(None, gt=0, le=1)
    chunked_prefill_size: int | None = None
    page_size: int | None = Field(None, gt=0)
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    speculative_algorithm: str | None = Field(None, description="EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM …")
    speculative_num_steps: int | None = Field(None, gt=0)
    speculative_eagle_topk: int | None = Field(None, gt=0)
    speculative_num_draft_tokens: int | None = Field(None, gt=0)
    speculative_draft_model_path: str | None = None
    disable_radix_cache: bool | None = None
    load_format: str | None = None
    random_seed: int | None = None
    extra_args: list[str] = Field(default_factory=list, description="further arguments, verbatim, after the typed ones")


class SglangEngineConfig(EngineConfig):
    """Launch ``python -m sglang.launch_server --model-path MODEL_SOURCE …`` (or attach with ``base_url``)."""

    kind: Literal["sglang"] = "sglang"
    model_source: str | None = Field(None, description="--model-path: a Hugging Face id or a local directory; `model` is the served name")
    python: str | None = Field(None, description=f"a Python with SGLang installed, run as `PYTHON -m {SERVER_MODULE} …` (default python3)")
    executable: str | None = Field(None, description="the `sglang` console script, run as `EXECUTABLE serve …` (instead of python)")
    host: str = Field("127.0.0.1", description="--host; 0.0.0.0 serves every interface (infermatrix connects on 127.0.0.1)")
    port: int | None = Field(None, gt=0, lt=65536, description="--port; a free port when omitted")
    enable_metrics: bool = Field(True, description="--enable-metrics: without it SGLang serves no gauges (steady state is then not checked)")
    args: SglangArgs = Field(default_factory=SglangArgs)
    env: dict[str, str] = Field(default_factory=dict, description="environment variables for the server")

    @model_validator(mode="after")
    def _check(self) -> SglangEngineConfig:
        if self.python and self.executable:
            raise ValueError("give either engine.python or engine.executable, not both")
        if not self.base_url and not self.model_source:
            raise ValueError("engine.model_source is required to launch SGLang (or give engine.base_url to attach)")
        return self

    def known_max_model_len(self) -> int | None:
        return self.max_model_len or self.args.context_length
