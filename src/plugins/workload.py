"""Built-in workload: prompts of an exact token length, distinct per key, by seed (DESIGN §2.3).

The builder itself is ``PromptBuilder`` of the public plugin API (``infermatrix.plugin``; its algorithm is
described where it lives), so this plugin is the hook alone, and other workloads build on the same class.
"""

from __future__ import annotations

from infermatrix.plugin import MatrixConfig, PromptBuilder, Tokenizer, hookimpl

__all__ = ["make_workload"]


@hookimpl
def make_workload(config: MatrixConfig, tokenizer: Tokenizer) -> PromptBuilder:
    """The ``make_workload`` hook: prompts by the run's seed and prompt mode."""
    return PromptBuilder(config.seed, config.prompt_mode, tokenizer)
