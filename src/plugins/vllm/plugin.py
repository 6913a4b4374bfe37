"""The ``vllm`` engine kind: launch ``vllm serve`` as a child process group (or attach), describe it,
and read its KV-cache capacity from ``/metrics`` or, failing that, from its start-up log.

Imports stay light (no vLLM here: it runs in its own environment, started as a command).
"""

from __future__ import annotations

import ipaddress
import shutil
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx

from infermatrix.plugin import (
    Capacity,
    EngineInfo,
    EngineTraits,
    LaunchedEngine,
    MetricNames,
    Recognition,
    ServerProbe,
    TokenizeAPI,
    detect_hardware,
    hookimpl,
    info_labels,
    metric_samples,
    redact_argv,
)
from infermatrix.plugins.vllm.config import SERVER_MODULE, VllmEngineConfig, expand_path
from infermatrix.plugins.vllm.describe import (
    args_summary,
    kv_tokens_from_log,
    quantization_label,
    version_details,
)

__all__ = ["VllmEngine", "VllmEngineConfig", "VLLM_TRAITS", "vllm_capacity", "capacity_from_metrics", "register_engines"]

# vLLM's processes talk over ZeroMQ sockets it names ``$VLLM_RPC_BASE_PATH/<uuid>`` (default: the temp directory) and
# leaves behind when its processes are stopped: ~100 an hour of test runs piled up in /tmp. Each launch gets a
# directory of its own, removed with the server. Short, under the temp directory: a Unix socket's path has 107 bytes.
RPC_DIR_VAR = "VLLM_RPC_BASE_PATH"

REPOSITORY = "github.com/vllm-project/vllm"
CACHE_CONFIG = "vllm:cache_config_info"

# vLLM's OpenAI server: its Prometheus names (v1 engine), /tokenize, /version, and its body extensions.
VLLM_TRAITS = EngineTraits(
    metrics=MetricNames(
        running="vllm:num_requests_running",
        waiting="vllm:num_requests_waiting",
        kv_usage="vllm:kv_cache_usage_perc",
        generated_tokens="vllm:generation_tokens_total",
        prompt_tokens="vllm:prompt_tokens_total",
        preemptions="vllm:num_preemptions_total",
        spec_draft_tokens="vllm:spec_decode_num_draft_tokens_total",
        spec_accepted_tokens="vllm:spec_decode_num_accepted_tokens_total",
        spec_drafts="vllm:spec_decode_num_drafts_total",
        spec_accepted_per_pos="vllm:spec_decode_num_accepted_tokens_per_pos_total",
        prefix_cache_queries="vllm:prefix_cache_queries_total",
        prefix_cache_hits="vllm:prefix_cache_hits_total",
    ),
    tokenize=TokenizeAPI(),
    version_path="/version",
    per_chunk_usage=True,
    ignore_eos=True,
)


def _is_local(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _bool(label: str | None) -> bool | None:
    return {"true": True, "false": False}.get(str(label).lower()) if label is not None else None


class VllmEngine(LaunchedEngine):
    traits = VLLM_TRAITS
    recognise_order = 60

    @classmethod
    async def recognise(cls, probe: ServerProbe) -> Recognition | None:
        """``vllm:`` metrics at ``/metrics`` (needed: ``/version`` alone is answered by others too),
        with ``/version`` named when it answers."""
        if not await probe.has_metrics("vllm:"):
            return None
        version = await probe.json("/version")
        if isinstance(version, dict) and version.get("version"):
            return Recognition("/version + vllm: metrics", {"version": str(version["version"])})
        return Recognition("vllm: metrics")

    def __init__(self, config: VllmEngineConfig, workdir: Path):
        super().__init__(config, workdir, host=config.host, port=config.port)
        self.config: VllmEngineConfig = config
        self.info: EngineInfo | None = None  # describe()'s answer, which read_capacity reads
        self.rpc_dir: Path | None = None  # this launch's directory for vLLM's sockets (RPC_DIR_VAR), removed on stop

    # ---- launching ------------------------------------------------------------------------

    def command(self) -> list[str]:
        c = self.config
        source = expand_path(c.model_source or "")
        if c.python:
            argv = [expand_path(c.python), "-m", SERVER_MODULE, "--model", source]
        else:
            argv = [expand_path(c.executable or "vllm"), "serve", source]
        if c.model:
            argv += ["--served-model-name", c.model]
        argv += c.args.flags("before_host")
        argv += ["--host", c.host, "--port", str(self.port)]
        if self.api_key:
            argv += ["--api-key", self.api_key]
        return argv + c.args.flags("after_host")

    def env(self) -> dict[str, str]:
        env = dict(self.config.env)
        if self.rpc_dir is not None:
            env.setdefault(RPC_DIR_VAR, str(self.rpc_dir))
        return env

    async def start(self) -> None:
        if not self.attach and RPC_DIR_VAR not in self.config.env:
            self._drop_rpc_dir()  # a restart's launch gets a fresh one
            self.rpc_dir = Path(tempfile.mkdtemp(prefix="imx-vllm-"))
        try:
            await super().start()
        except BaseException:
            self._drop_rpc_dir()
            raise

    async def stop(self) -> None:
        try:
            await super().stop()
        finally:
            self._drop_rpc_dir()

    def kill(self) -> None:
        super().kill()
        self._drop_rpc_dir()

    def _drop_rpc_dir(self) -> None:
        if self.rpc_dir is not None:
            shutil.rmtree(self.rpc_dir, ignore_errors=True)
            self.rpc_dir = None

    def log_text(self) -> str:
        if self.attach:
            return ""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    # ---- describing -----------------------------------------------------------------------

    async def describe(self, client: httpx.AsyncClient) -> EngineInfo:
        info = await super().describe(client)
        metrics = await self.metrics_page(client)
        entry = await self._model_entry(client, info.model)
        if info.max_model_len is None:
            info.max_model_len = entry.get("max_model_len")
        argv = [] if self.attach else redact_argv(self.command(), [self.api_key] if self.api_key else [])
        log = self.log_text()
        info.extra.update(describe_vllm(argv, info_labels(metrics, CACHE_CONFIG), log, info.version, self.config))
        source = self.config.model_source
        info.extra["model_source"] = expand_path(source) if source and not self.attach else entry.get("root") or source
        if not self.attach or _is_local(self.base_url):
            info.hardware = await anyio.to_thread.run_sync(detect_hardware)
            if info.extra.get("backend") is None:
                info.extra["backend"] = "cuda" if info.hardware.get("gpu_count") else None
        self.info = info
        return info

    async def read_capacity(self, client: httpx.AsyncClient) -> Capacity | None:
        info = self.info if self.info is not None else EngineInfo(engine=self.kind, model=self.config.model or "")
        return vllm_capacity(await self.metrics_page(client), info, self.config)

    async def _model_entry(self, client: httpx.AsyncClient, model: str) -> dict[str, Any]:
        try:
            data = (await client.get(f"{self.base_url}/v1/models", headers=self.headers, timeout=10)).json()
        except (httpx.HTTPError, ValueError):
            return {}
        return next((m for m in data.get("data") or [] if m.get("id") == model), {})


def describe_vllm(
    argv: list[str], labels: dict[str, str], log: str, version: str | None, config: VllmEngineConfig
) -> dict[str, Any]:
    """``EngineInfo.extra`` for a vLLM server: flags from its argv (launched), the cache config it
    reports in ``/metrics``, and its log's KV-cache line. Launched, vLLM's own defaults fill what
    the command line leaves out (1-way parallel, no expert parallelism, no speculative decoding)."""
    s = args_summary(argv)
    launched = bool(argv)
    spec = s.get("speculative_config") if isinstance(s.get("speculative_config"), dict) else None
    kv_log = kv_tokens_from_log(log) if log else None
    prefix = _bool(labels.get("enable_prefix_caching"))
    device = (kv_log or {}).get("device") or ("CPU" if config.env.get("VLLM_TARGET_DEVICE") == "cpu" else None)
    extra: dict[str, Any] = {
        "repository": REPOSITORY,
        **version_details(version),
        "backend": {"CPU": "cpu", "GPU": "cuda"}.get(device or "", (device or "").lower() or None),
        "tensor_parallel_size": s.get("tensor_parallel_size", 1 if launched else None),
        "pipeline_parallel_size": s.get("pipeline_parallel_size", 1 if launched else None),
        "data_parallel_size": s.get("data_parallel_size", 1 if launched else None),
        "expert_parallel": s.get("expert_parallel", False if launched else None),
        "dtype": s.get("dtype", "auto" if launched else None),
        "quantization": quantization_label(s),
        "kv_cache_dtype": labels.get("cache_dtype") or s.get("kv_cache_dtype"),
        "speculative_method": spec.get("method") if spec else None,
        "speculative_tokens": spec.get("num_speculative_tokens") if spec else None,
        "prefix_caching": prefix if prefix is not None else s.get("prefix_caching"),
        "max_num_seqs": s.get("max_num_seqs"),
        "max_num_batched_tokens": s.get("max_num_batched_tokens"),
        "gpu_memory_utilization": s.get("gpu_memory_utilization") or _float(labels.get("gpu_memory_utilization")),
        "block_size": _int(labels.get("block_size")) or s.get("block_size"),
        "num_gpu_blocks": _int(labels.get("num_gpu_blocks")),
        "kv_cache_size_tokens": _int(labels.get("kv_cache_size_tokens")),
        "kv_cache_log": kv_log,
        "engine_args": {k: v for k, v in s.items() if k != "speculative_config"} | ({"speculative_config": spec} if spec else {}),
    }
    if launched and not spec:
        extra["speculative_method"] = "none"
        extra["speculative_tokens"] = 0
    return extra


def _float(label: str | None) -> float | None:
    try:
        return float(label) if label not in (None, "", "None") else None
    except ValueError:
        return None


def _int(label: str | None) -> int | None:
    try:
        return int(float(label)) if label not in (None, "", "None") else None
    except ValueError:
        return None


def capacity_from_metrics(text: str | None) -> Capacity | None:
    """KV token budget from ``vllm:cache_config_info``: num_gpu_blocks × block_size, summed over the
    engine's data-parallel ranks (each rank has a KV cache of its own and reports its own sample, told
    apart by its ``engine`` label); ``None`` when absent."""
    ranks: dict[str, tuple[int, int, int | None]] = {}
    for i, (labels, _) in enumerate(metric_samples(text or "", CACHE_CONFIG)):
        blocks = _int(labels.get("num_gpu_blocks"))
        if blocks is None:
            blocks = _int(labels.get("num_gpu_blocks_override"))
        block = _int(labels.get("block_size"))
        if blocks and block:
            ranks.setdefault(labels.get("engine", str(i)), (blocks, block, _int(labels.get("max_num_seqs"))))
    if not ranks:
        return None
    kv = sum(blocks * block for blocks, block, _ in ranks.values())
    seqs = [s for _, _, s in ranks.values()]
    blocks, block, _ = next(iter(ranks.values()))
    if len(ranks) == 1:
        source = f"{CACHE_CONFIG} (num_gpu_blocks {blocks} × block_size {block})"
    else:
        source = f"{CACHE_CONFIG} ({len(ranks)} data-parallel ranks: Σ num_gpu_blocks × block_size = {kv:,} tokens)"
    return Capacity(
        kv_tokens=kv, max_seqs=sum(s for s in seqs if s) if all(seqs) else None, source=source,
        detail={"num_gpu_blocks": blocks, "block_size": block, "ranks": len(ranks),
                "per_rank": {k: {"num_gpu_blocks": b, "block_size": bs} for k, (b, bs, _) in ranks.items()}},
    )  # fmt: skip


def vllm_capacity(metrics_text: str | None, info: EngineInfo, config: VllmEngineConfig) -> Capacity | None:
    """vLLM: ``cache_config_info`` in ``/metrics``, else the start-up log's "KV cache size: N tokens";
    max sequences from ``--max-num-seqs`` when the command line says it."""
    max_seqs = info.extra.get("max_num_seqs") or config.args.max_num_seqs
    cap = capacity_from_metrics(metrics_text)
    if cap is not None:
        ranks = cap.detail.get("ranks", 1)
        if cap.max_seqs is None and max_seqs:
            # --max-num-seqs is per data-parallel rank: each rank schedules its own batch.
            per = f" × {ranks} ranks" if ranks > 1 else ""
            cap.max_seqs, cap.source = max_seqs * ranks, f"{cap.source}; max_num_seqs {max_seqs}{per} (--max-num-seqs)"
        return cap
    kv_log = info.extra.get("kv_cache_log")
    if kv_log and kv_log.get("kv_tokens"):
        return Capacity(
            kv_tokens=kv_log["kv_tokens"], max_seqs=max_seqs,
            source=f"engine log: {kv_log.get('device') or ''} KV cache size {kv_log['kv_tokens']:,} tokens".replace("  ", " "),
            detail={"log_line": kv_log.get("line")},
        )
    if max_seqs:
        return Capacity(kv_tokens=None, max_seqs=max_seqs, source=f"max_num_seqs {max_seqs} (--max-num-seqs); KV budget unknown")
    return None


# ---- hooks ------------------------------------------------------------------------------------


@hookimpl
def register_engines(register: Any) -> None:
    register(VllmEngineConfig, VllmEngine)
