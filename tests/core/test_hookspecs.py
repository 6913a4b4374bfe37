"""Every hook is documented in docs/plugins.md with its exact signature, and plugins load like third-party ones."""

import inspect
from pathlib import Path

from infermatrix.core import hookspecs
from infermatrix.core.plugins import BUILTIN_PLUGINS, get_plugin_manager, plugin_summary

DOCS = Path(__file__).parents[2] / "docs" / "plugins.md"


def _hooks():
    return [f for name, f in vars(hookspecs).items() if callable(f) and hasattr(f, "infermatrix_spec")]


def test_every_hook_documented_with_exact_signature():
    text = DOCS.read_text()
    hooks = _hooks()
    assert len(hooks) >= 5
    for f in hooks:
        sig = str(inspect.signature(f)).replace("'", "")
        assert f"`{f.__name__}{sig}`" in text, f"docs/plugins.md lacks `{f.__name__}{sig}`"
        assert ":param" in (f.__doc__ or ""), f"{f.__name__} has no :param: docs"


def test_builtins_are_entry_points_too():
    from importlib import metadata

    eps = {ep.name: ep.value for ep in metadata.entry_points(group="infermatrix")}
    for name, module in BUILTIN_PLUGINS.items():
        assert eps.get(name) == module


def test_fresh_manager_each_call_and_summary():
    a, b = get_plugin_manager(), get_plugin_manager()
    assert a is not b
    rows = {r["name"]: r for r in plugin_summary(a)}
    assert "register_engines" in rows["sim"]["hooks"] and rows["sim"]["engines"] == ["sim"]
    assert "register_commands" in rows["sim"]["hooks"]  # `infermatrix sim serve` is the sim's own command
    assert "detect_loop" in rows["loops"]["hooks"]
    assert rows["vllm"]["engines"] == ["vllm"] and rows["openai"]["engines"] == ["openai"]


def test_extra_plugin_is_called():
    class Counter:
        @hookspecs.hookimpl
        def detect_loop(self, text, output_tokens, config):
            return None

    pm = get_plugin_manager(load_entrypoints=False, extra=[Counter()])
    assert any(isinstance(p, Counter) for p in pm.get_plugins())
