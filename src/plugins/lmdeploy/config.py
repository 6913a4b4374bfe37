"""``[engine] kind = "lmdeploy"``: what ``lmdeploy serve api_server`` serves, and its flags.

LMDeploy's flags use dashes (``--server-port``, ``--cache-max-entry-count``); the common ones are typed
fields of ``[engine.args]``, anything else goes verbatim in ``args.extra_args``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from infermatrix.plugin import EngineConfig, Strict

__all__ = ["LmdeployArgs", "LmdeployEngineConfig"]


class LmdeployArgs(Strict):
    """Typed ``lmdeploy serve api_server`` flags, emitted in this order; ``None`` leaves LMDeploy's default."""

    backend: Literal["pytorch", "turbomind"] | None = None
    tp: int | None = Field(None, gt=0)
    dp: int | None = Field(None, gt=0)
    ep: int | None = Field(None, gt=0)
    session_len: int | None = Field(None, gt=0, description="the longest sequence (prompt + output)")
    max_batch_size: int | None = Field(None, gt=0, description="most sequences at once")
    cache_max_entry_count: float | None = Field(None, gt=0, le=1, description="fraction of free GPU memory for the KV cache")
    cache_block_seq_len: int | None = Field(None, gt=0)
    enable_prefix_caching: bool | None = None
    max_prefill_token_num: int | None = Field(None, gt=0)
    dtype: str | None = None
    quant_policy: int | None = None
    model_format: str | None = None
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    enable_abort_handling: bool | None = Field(None, description="needed for POST /abort_request (newer releases)")
    extra_args: list[str] = Field(default_factory=list, description="further arguments, verbatim, after the typed ones")


class LmdeployEngineConfig(EngineConfig):
    """Launch ``lmdeploy serve api_server MODEL_SOURCE …`` (or attach with ``base_url``)."""

    kind: Literal["lmdeploy"] = "lmdeploy"
    model_source: str | None = Field(None, description="a Hugging Face id or a local directory; `model` is the served name (--model-name)")
    executable: str = Field("lmdeploy", description="the lmdeploy console script")
    host: str = Field("127.0.0.1", description="--server-name; 0.0.0.0 serves every interface (infermatrix connects on 127.0.0.1)")
    port: int | None = Field(None, gt=0, lt=65536, description="--server-port; a free port when omitted")
    enable_metrics: bool = Field(True, description="--enable-metrics: without it LMDeploy serves no gauges (steady state is then not checked)")
    args: LmdeployArgs = Field(default_factory=LmdeployArgs)
    env: dict[str, str] = Field(default_factory=dict, description="environment variables for the server")

    @model_validator(mode="after")
    def _check(self) -> LmdeployEngineConfig:
        if not self.base_url and not self.model_source:
            raise ValueError("engine.model_source is required to launch LMDeploy (or give engine.base_url to attach)")
        return self

    def known_max_model_len(self) -> int | None:
        return self.max_model_len or self.args.session_len
