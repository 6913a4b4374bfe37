"""Which capacity answer wins: config > an ``estimate_capacity`` hook that answers > the engine's own
``read_capacity`` > unknown (unlimited, said so) — as docs/plugins.md and docs/writing-a-plugin.md say."""

from __future__ import annotations

from infermatrix.core.registry import validate_config
from infermatrix.core.hookspecs import hookimpl
from infermatrix.core.plugins import get_plugin_manager
from infermatrix.core.run.planning import resolve_capacity
from infermatrix.core.types import Capacity, EngineInfo

OWN = Capacity(kv_tokens=1000, max_seqs=8, source="engine's read_capacity")


class Override:
    def __init__(self, answer: Capacity | None):
        self.answer = answer
        self.asked: list[str | None] = []

    @hookimpl
    def estimate_capacity(self, config, info, metrics_text):
        self.asked.append(metrics_text)
        return self.answer


def _resolve(plugin: Override | None, engine: dict | None = None, own: Capacity | None = OWN) -> Capacity:
    pm = get_plugin_manager(load_entrypoints=False, extra=[plugin] if plugin else [])
    cfg = validate_config(pm, {"engine": {"kind": "openai", "base_url": "http://127.0.0.1:1", **(engine or {})}}, "t")
    return resolve_capacity(pm, cfg, EngineInfo(engine="openai", model="m"), "page", own)


def test_engine_answer_when_no_hook_answers():
    assert _resolve(None) is OWN
    silent = Override(None)
    assert _resolve(silent) is OWN and silent.asked == ["page"]  # asked, declined: the engine's answer stands


def test_hook_overrides_the_engine():
    hook = Capacity(kv_tokens=7, max_seqs=3, source="a plugin's estimate_capacity")
    assert _resolve(Override(hook)) is hook


def test_config_overrides_both_field_by_field():
    hook = Capacity(kv_tokens=7, max_seqs=3, source="hook")
    cap = _resolve(Override(hook), {"kv_tokens": 500})
    assert (cap.kv_tokens, cap.max_seqs, cap.source) == (500, 3, "config")
    cap = _resolve(None, {"max_seqs": 2})
    assert (cap.kv_tokens, cap.max_seqs) == (1000, 2)


def test_nobody_knows():
    cap = _resolve(None, own=None)
    assert cap.kv_tokens is None and cap.max_seqs is None and cap.source.startswith("unknown")
