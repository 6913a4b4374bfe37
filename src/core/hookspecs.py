"""The hooks a plugin can implement. Hooks are synchronous: they register or return objects whose
async methods do the work (pluggy has no async hooks)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

import pluggy

if TYPE_CHECKING:
    import click

    from infermatrix.core.config import EngineConfig, LoopConfig, MatrixConfig
    from infermatrix.core.engine.contract import Engine
    from infermatrix.core.types import Capacity, EngineInfo, LoopFinding, Tokenizer, Workload

__all__ = ["hookspec", "hookimpl", "PROJECT"]

PROJECT = "infermatrix"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_engines(register: Callable[[type[EngineConfig], type[Engine]], None]) -> None:
    """Add engine kinds.

    :param register: call it as ``register(ConfigClass, EngineClass)``: a pydantic config class
        (subclass of ``EngineConfig``) whose ``kind`` field is a ``Literal`` with that default, and the
        engine class (subclass of ``AttachEngine`` or ``LaunchedEngine``) built for it. The config
        class becomes one arm of the ``[engine]`` table's discriminated union; a kind registered by
        two plugins is an error naming both.
    """


@hookspec(firstresult=True)
def launch_engine(config: EngineConfig, workdir: Path) -> Engine | None:
    """Override: return an (unstarted) engine for this config, or ``None`` to let the engine class
    registered for ``config.kind`` be built (what almost every plugin wants: don't implement this).

    :param config: the validated ``[engine]`` table.
    :param workdir: a directory for this run's files (engine log, profile); it exists.
    """


@hookspec(firstresult=True)
def estimate_capacity(config: EngineConfig, info: EngineInfo, metrics_text: str | None) -> Capacity | None:
    """Override the engine's own capacity answer (``Engine.read_capacity``); ``None`` to leave it.

    :param config: the validated ``[engine]`` table.
    :param info: what the ready engine said about itself (``info.extra`` holds engine-specific answers).
    :param metrics_text: the body of the engine's metrics page (``traits.metrics.path``), or ``None``
        if it declares or serves none.
    """


@hookspec(firstresult=True)
def make_workload(config: MatrixConfig, tokenizer: Tokenizer, options: dict) -> Workload | None:
    """Return the prompt builder for this run. When more than one plugin implements it, ``matrix.workload``
    names the one a run uses (two without a choice is a config error naming both; a plugin module that sets
    ``WORKLOAD_OPT_IN = True`` is never chosen unless named).

    A workload with traffic of its own (shared-prefix, multi-turn) also has ``async def sessions()`` returning
    ``Session`` objects; the runner sends them after the matrix and the load points (docs/workloads.md).

    :param config: the validated ``[matrix]`` table (seed, prompt mode).
    :param tokenizer: counts tokens the way the server does.
    :param options: the ``[workload]`` table (the chosen workload's parameters; may be empty). An
        implementation may leave this argument out of its signature.
    """


@hookspec(firstresult=True)
def local_tokenizer(config: EngineConfig, model: str, api: str) -> Tokenizer | None:
    """A tokenizer the harness holds for ``model`` (e.g. from the model directory), or ``None``.

    When one answers, prompts are sized with it and the engine's tokenize endpoint is not used (an engine
    without one need not fall back to usage counting). Its ``count`` must count as the server does for
    ``api`` (``chat``: with the chat template); an optional ``count_output(text)`` counts generated text.
    The config's ``engine.tokenizer`` wins over every answer.

    :param config: the validated ``[engine]`` table.
    :param model: the served model name (as the engine reported it).
    :param api: ``completions`` or ``chat`` (``matrix.api``).
    """


@hookspec
def detect_loop(text: str, output_tokens: int, config: LoopConfig) -> LoopFinding | None:
    """Return evidence that ``text`` (one request's output) repeats itself, or ``None``.

    All implementations are asked; any finding marks the request looped.

    :param text: the request's whole output text (reasoning and content); may be empty when the server
        sent tokens but no visible text (whitespace or stripped special tokens), which is worth judging.
    :param output_tokens: how many tokens the server says it produced.
    :param config: the validated ``[loops]`` table.
    """


@hookspec
def register_commands(cli: click.Group) -> None:
    """Add sub-commands to the ``infermatrix`` command line.

    :param cli: the top-level click group.
    """
