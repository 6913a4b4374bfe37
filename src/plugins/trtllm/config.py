"""``[engine] kind = "trtllm"``: what ``trtllm-serve`` serves, its flags, and its LLM-API options file.

``trtllm-serve`` flags use underscores (``--tp_size``, ``--max_batch_size``). Settings it has no flag
for go in ``[engine.llm_api_options]``, written to a YAML file given as ``--config``; infermatrix adds
``enable_iter_perf_stats`` and ``return_perf_metrics`` there (unless set), without which the server
reports no iteration statistics and no Prometheus gauges.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from infermatrix.plugin import EngineConfig, Strict

__all__ = ["TrtllmArgs", "TrtllmEngineConfig", "METRICS_OPTIONS"]

# What makes trtllm-serve report iteration stats (/metrics) and Prometheus gauges (/prometheus/metrics).
METRICS_OPTIONS: dict[str, Any] = {"enable_iter_perf_stats": True, "return_perf_metrics": True}


class TrtllmArgs(Strict):
    """Typed ``trtllm-serve`` flags, emitted in this order; ``None`` leaves its own default."""

    backend: str | None = Field(None, description='"pytorch" (the default in current releases), "tensorrt" or "_autodeploy"')
    tp_size: int | None = Field(None, gt=0)
    pp_size: int | None = Field(None, gt=0)
    ep_size: int | None = Field(None, gt=0)
    max_batch_size: int | None = Field(None, gt=0, description="most requests scheduled at once")
    max_num_tokens: int | None = Field(None, gt=0)
    max_seq_len: int | None = Field(None, gt=0)
    kv_cache_free_gpu_memory_fraction: float | None = Field(None, gt=0, le=1)
    reasoning_parser: str | None = None
    tool_parser: str | None = None
    trust_remote_code: bool | None = None
    extra_args: list[str] = Field(default_factory=list, description="further arguments, verbatim, after the typed ones")


class TrtllmEngineConfig(EngineConfig):
    """Launch ``trtllm-serve MODEL_SOURCE …`` (or attach with ``base_url``)."""

    kind: Literal["trtllm"] = "trtllm"
    model_source: str | None = Field(None, description="a Hugging Face id, a checkpoint or an engine directory")
    executable: str = Field("trtllm-serve", description="the trtllm-serve console script")
    host: str = Field("127.0.0.1", description="--host; 0.0.0.0 serves every interface (infermatrix connects on 127.0.0.1)")
    port: int | None = Field(None, gt=0, lt=65536, description="--port; a free port when omitted")
    args: TrtllmArgs = Field(default_factory=TrtllmArgs)
    llm_api_options: dict[str, Any] = Field(default_factory=dict, description="LLM-API settings written to the --config YAML file")
    env: dict[str, str] = Field(default_factory=dict, description="environment variables for the server")

    @model_validator(mode="after")
    def _check(self) -> TrtllmEngineConfig:
        if not self.base_url:
            if not self.model_source:
                raise ValueError("engine.model_source is required to launch trtllm-serve (or give engine.base_url to attach)")
            if self.api_key_env or self.api_key_file:
                raise ValueError("trtllm-serve has no API-key option: launch it without engine.api_key_env / api_key_file, or attach with engine.base_url")
        return self

    def known_max_model_len(self) -> int | None:
        return self.max_model_len or self.args.max_seq_len

    def options(self) -> dict[str, Any]:
        """The --config file's contents: the metrics switches, then the user's settings over them."""
        return {**METRICS_OPTIONS, **self.llm_api_options}
