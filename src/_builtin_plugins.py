"""The plugins that ship with infermatrix, by entry-point name -> module (pyproject.toml lists the same).

Kept outside ``infermatrix.core`` so the core names no engine and imports no plugin."""

BUILTIN_PLUGINS: dict[str, str] = {
    "sim": "infermatrix.plugins.sim.plugin",
    "openai": "infermatrix.plugins.openai_engine",
    "workload": "infermatrix.plugins.workload",
    "shared-prefix": "infermatrix.plugins.shared_prefix",
    "multi-turn": "infermatrix.plugins.multi_turn",
    "tasks": "infermatrix.plugins.tasks",
    "loops": "infermatrix.plugins.loops",
    "vllm": "infermatrix.plugins.vllm.plugin",
    "sglang": "infermatrix.plugins.sglang.plugin",
    "trtllm": "infermatrix.plugins.trtllm.plugin",
    "lmdeploy": "infermatrix.plugins.lmdeploy.plugin",
    "llamacpp": "infermatrix.plugins.llamacpp.plugin",
}
