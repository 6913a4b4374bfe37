"""The ``llamacpp`` engine kind: launch ``llama-server`` (llama.cpp's OpenAI-compatible server) as a
child process group, or attach to one; describe it from ``/props``, ``/slots`` and ``/v1/models``;
read its capacity from the slots; erase its slots' caches.

llama-server is a native binary (scripts/setup-engine.sh llama-cpp builds one): nothing of it is
imported here, it is only started as a command and asked over HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx

from infermatrix.plugin import (
    Capacity,
    EngineError,
    EngineInfo,
    EngineTraits,
    HttpCall,
    LaunchedEngine,
    MetricNames,
    Recognition,
    ServerProbe,
    TokenizeAPI,
    detect_hardware,
    hookimpl,
    send_again_if_stale,
)
from infermatrix.plugins.llamacpp.config import LlamaCppEngineConfig, expand_path
from infermatrix.plugins.llamacpp.describe import describe_llamacpp, llamacpp_capacity

__all__ = ["LlamaCppEngine", "LlamaCppEngineConfig", "LLAMACPP_TRAITS", "LLAMACPP_METRICS", "LlamaTokenizeAPI", "register_engines"]


@dataclass(frozen=True)
class LlamaTokenizeAPI(TokenizeAPI):
    """llama-server's ``POST /tokenize``: ``{"content": text, "add_special": bool}`` -> ``{"tokens": [...]}``.

    Its ``add_special`` defaults to false, while a completion request's prompt is tokenized with
    special tokens (BOS where the model adds one): so it is always sent, true when counting prompts.
    There is no chat template here (``/apply-template`` is a separate call), hence ``chat=False``.
    """

    path: str = "/tokenize"
    text_field: str = "content"
    send_model: bool = False
    chat: bool = False
    special_tokens_field: str | None = "add_special"
    tokens_field: str = "tokens"

    def text_body(self, model: str, text: str, *, special_tokens: bool = True) -> dict[str, Any]:
        return {self.text_field: text, "add_special": special_tokens}


# llama-server's Prometheus page (needs --metrics; the launcher always passes it). There is no
# KV-usage gauge and no preemption counter. Its token counters move when a request ends (a slot is
# released, cancelled streams included), not token by token: read before and after a cell they
# miss the requests the window's edges cut (measured: 0-100 % short on the tiny model), so they are
# declared counted_at_request_end and not read during runs; over a whole run they match what was
# streamed (tests/llamacpp/test_llamacpp_e2e.py reads them after an attached run).
LLAMACPP_METRICS = MetricNames(
    counted_at_request_end=True,
    running="llamacpp:requests_processing",
    waiting="llamacpp:requests_deferred",
    generated_tokens="llamacpp:tokens_predicted_total",
    prompt_tokens="llamacpp:prompt_tokens_total",
    spec_draft_tokens="llamacpp:spec_decode_num_draft_tokens_total",
    spec_accepted_tokens="llamacpp:spec_decode_num_accepted_tokens_total",
)

# The prefix-cache reset, slot by slot: a per-slot path, so the plugin sends it (erase_slots).
SLOT_ERASE = HttpCall("POST", "/slots/{slot_id}?action=erase")

LLAMACPP_TRAITS = EngineTraits(
    metrics=LLAMACPP_METRICS,
    tokenize=LlamaTokenizeAPI(),
    version_path=None,  # no /version: the build is /props' build_info
    # No usage in streamed chunks (only in the last one), but with "timings_per_token" every chunk
    # carries timings.predicted_n: the tokens generated so far, which is what per-chunk usage means.
    per_chunk_usage=True,
    per_chunk_usage_fields={"timings_per_token": True},
    per_chunk_usage_path=("timings", "predicted_n"),
    ignore_eos=True,  # the native "ignore_eos" field, accepted on the OpenAI endpoints
    prefix_cache_reset=SLOT_ERASE,  # per slot: see erase_slots()
    abort=None,  # closing the stream cancels the request
)


class LlamaCppEngine(LaunchedEngine):
    traits = LLAMACPP_TRAITS
    recognise_order = 50

    @classmethod
    async def recognise(cls, probe: ServerProbe) -> Recognition | None:
        """Its ``/props`` (slots, generation defaults, build), else ``llamacpp:`` metrics (with --metrics)."""
        props = await probe.json("/props")
        if isinstance(props, dict) and "default_generation_settings" in props and ("total_slots" in props or "build_info" in props):
            return Recognition("/props", {"build_info": props.get("build_info")})
        return Recognition("llamacpp: metrics") if await probe.has_metrics("llamacpp:") else None

    def __init__(self, config: LlamaCppEngineConfig, workdir: Path):
        super().__init__(config, workdir, host=config.host, port=config.port)
        self.config: LlamaCppEngineConfig = config
        self.props: dict[str, Any] = {}
        self.slots: list[dict[str, Any]] | None = None

    # ---- launching ------------------------------------------------------------------------

    def command(self) -> list[str]:
        c = self.config
        argv = [expand_path(c.executable), "-m", expand_path(c.model_source or "")]
        if c.model:
            argv += ["--alias", c.model]
        argv += ["--host", c.host, "--port", str(self.port)]
        if self.api_key:
            argv += ["--api-key", self.api_key]
        # --metrics: the gauges steady state reads; /slots is on by default. The slot actions
        # (erase: the cache reset) answer only with a --slot-save-path: the run's directory unless given.
        argv += ["--metrics"]
        if c.args.slot_save_path is None:
            argv += ["--slot-save-path", str(self.workdir / "slots")]
        return argv + c.args.flags()

    def env(self) -> dict[str, str]:
        return dict(self.config.env)

    async def start(self) -> None:
        if not self.attach:
            save = self.config.args.slot_save_path
            Path(expand_path(save) if save else self.workdir / "slots").mkdir(parents=True, exist_ok=True)  # it must exist
        await super().start()

    # ---- describing -----------------------------------------------------------------------

    async def _get_json(self, client: httpx.AsyncClient, path: str) -> Any:
        try:  # a pooled connection llama-server closed (it closes idle ones) is asked again on a fresh one
            r = await send_again_if_stale(lambda: client.get(f"{self.base_url}{path}", headers=self.headers, timeout=10))
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    async def read_server_state(self, client: httpx.AsyncClient) -> None:
        """``/props`` and ``/slots`` (``/slots`` answers 501 when started with ``--no-slots``)."""
        props = await self._get_json(client, "/props")
        slots = await self._get_json(client, "/slots")
        self.props = props if isinstance(props, dict) else {}
        self.slots = slots if isinstance(slots, list) else None

    def _flags(self) -> dict[str, Any]:
        """The launch flags describe_llamacpp reads ({} when attached: nothing is known)."""
        if self.attach:
            return {}
        a = self.config.args
        return {"unified": a.unified_kv(), "speculative": a.speculative(), **a.model_dump(exclude={"extra_args"})}

    async def describe(self, client: httpx.AsyncClient) -> EngineInfo:
        info = await super().describe(client)
        await self.read_server_state(client)
        models = await self._get_json(client, "/v1/models") or {}
        entries: list[dict[str, Any]] = models.get("data") or [] if isinstance(models, dict) else []
        entry: dict[str, Any] = next((m for m in entries if m.get("id") == info.model), {})
        info.version = self.props.get("build_info") or info.version
        extra = describe_llamacpp(self.props, self.slots, entry, self._flags())
        if info.max_model_len is None:  # one request can use at most its slot's context
            slot_ctx = extra.get("slot_n_ctx")
            info.max_model_len = slot_ctx if isinstance(slot_ctx, int) else None
        info.extra.update(extra)
        info.extra["model_source"] = expand_path(self.config.model_source) if self.config.model_source and not self.attach else extra.get("model_path")
        if not self.attach:
            info.hardware = await anyio.to_thread.run_sync(detect_hardware)
            if info.extra.get("backend") is None:
                info.extra["backend"] = "gpu" if info.hardware.get("gpu_count") else "cpu"
        return info

    async def read_capacity(self, client: httpx.AsyncClient) -> Capacity | None:
        if not self.props:
            await self.read_server_state(client)
        return llamacpp_capacity(self.props, self.slots, None if self.attach else self.config.args.unified_kv())

    # ---- cache ----------------------------------------------------------------------------

    async def erase_slots(self, client: httpx.AsyncClient) -> int:
        """Erase every slot's cached prompt (``POST /slots/{id}?action=erase``); how many were erased.

        llama-server has no one-call prefix-cache reset: each slot keeps its own last prompt.
        """
        await self.read_server_state(client)
        ids = [s.get("id") for s in self.slots or [] if isinstance(s, dict) and s.get("id") is not None]
        if not ids:
            ids = list(range(int(self.props.get("total_slots") or 0)))
        if not ids:  # every llama-server has a slot: neither /slots nor /props answered, so nothing was erased
            raise EngineError("llama-server named no slots to erase: neither /slots nor /props answered")
        for slot_id in ids:
            url = f"{self.base_url}{SLOT_ERASE.path.format(slot_id=slot_id)}"
            r = await send_again_if_stale(lambda: client.request(SLOT_ERASE.method, url, headers=self.headers, timeout=10))  # noqa: B023 (awaited here)
            if r.status_code != 200:  # 501 without --slot-save-path: say what the server says
                raise EngineError(f"llama-server refused to erase slot {slot_id} ({r.status_code}): {r.text[:200]}")
        return len(ids)

    async def reset_prefix_cache(self, client: httpx.AsyncClient) -> str | None:
        """The runner's reset before a prefill probe: every slot erased (see :meth:`erase_slots`)."""
        try:
            return f"ok ({await self.erase_slots(client)} slots erased)"
        except EngineError as exc:
            return str(exc)
        except httpx.HTTPError as exc:  # no answer even on fresh connections: noted, as the core notes its declared calls
            return self.redact(SLOT_ERASE.failed(exc))


# ---- hooks ------------------------------------------------------------------------------------


@hookimpl
def register_engines(register: Any) -> None:
    register(LlamaCppEngineConfig, LlamaCppEngine)

