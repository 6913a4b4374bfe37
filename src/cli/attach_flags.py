"""The engine and cell flags ``infermatrix run`` and ``infermatrix search`` share: a config file or ``--base-url`` to
attach (docs/engines.md), the engine's kind, model and API key, and each cell's duration, output cap and API.

One decorator adds the flags, one function turns them into the config's ``engine`` and ``matrix`` tables, so both
commands read them the same way and a new flag lands in both.
"""

from __future__ import annotations

from typing import Any, Callable

import click

from infermatrix.cli.common import number_option
from infermatrix.core.config import ConfigError, load_config

__all__ = ["ATTACH_FLAGS", "attach_options", "attach_config"]

# In the order of attach_config's keyword arguments (run's --resume names the ones it refuses).
ATTACH_FLAGS = ("--engine", "--base-url", "--model", "--duration", "--max-output", "--api", "--api-key-env", "--api-key-file")


def attach_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add the engine flags (parameters ``engine_kind``, ``base_url``, ``model``, ``api_key_env``, ``api_key_file``)
    and the cell flags (``duration``, ``max_output``, ``api``) to a command."""
    options = (
        click.option("--engine", "engine_kind", default=None,
                     help="engine kind (`infermatrix plugins` lists them); with --base-url and no config the default is auto (recognise "
                          "the engine; openai: plain OpenAI API only); without --base-url it launches (set the kind's fields with "
                          "--set engine.<field>=...); with a config, it replaces engine.kind"),
        click.option("--base-url", default=None, help="attach to a running OpenAI-compatible server"),
        click.option("--model", default=None, help="served model name"),
        click.option("--duration", default=None, metavar="SECONDS", help="seconds per decode cell"),
        click.option("--max-output", default=None, metavar="TOKENS",
                     help="max output tokens per request: the matrix's, and (run) every --rate / [[load]] rate point's that sets "
                          "none itself; a trace replay's requests keep the trace's lengths, a workload pass its output_tokens"),
        click.option("--api", type=click.Choice(["chat", "completions"]), default=None),
        click.option("--api-key-env", default=None, metavar="VAR", help="environment variable holding the API key"),
        click.option("--api-key-file", default=None, metavar="PATH", help="file holding the API key"),
    )  # fmt: skip
    for option in reversed(options):
        f = option(f)
    return f


def attach_config(
    config_file: str | None, *, engine_kind: str | None, base_url: str | None, model: str | None, duration: str | None,
    max_output: str | None, api: str | None, api_key_env: str | None, api_key_file: str | None,
) -> tuple[dict[str, Any], str]:
    """The config the flags describe, and where it came from: ``config_file`` with the flags laid over it, or, without
    one, an attached engine (kind ``auto`` unless ``--engine`` names one). Raises :class:`ConfigError` (one line)."""
    if config_file:
        data, source = load_config(config_file), config_file
    elif base_url or engine_kind:
        # --base-url alone: recognise the engine behind it (docs/engines.md); --engine openai is the plain choice.
        data, source = {"engine": {"kind": engine_kind or "auto"}}, "command line"
    else:
        raise ConfigError("give a CONFIG_FILE, or --base-url URL --model NAME to attach to a running server")
    engine, matrix = data.setdefault("engine", {}), data.setdefault("matrix", {})
    for name, table in (("engine", engine), ("matrix", matrix)):
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: {name}: must be a table")
    for key, value in (("kind", engine_kind), ("base_url", base_url), ("model", model), ("api_key_env", api_key_env),
                       ("api_key_file", api_key_file)):  # fmt: skip
        if value is not None:
            engine[key] = value
    for key, value in (("duration_s", number_option(float, duration, "--duration")),
                       ("max_output", number_option(int, max_output, "--max-output")), ("api", api)):  # fmt: skip
        if value is not None:
            matrix[key] = value
    return data, source
