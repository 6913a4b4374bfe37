"""``plugins`` and ``sim serve``."""

from __future__ import annotations

import click
from rich.console import Console

from infermatrix.cli.common import fail
from infermatrix.core.config import ConfigError
from infermatrix.core.plugins import get_plugin_manager, plugin_summary

@click.command()
def plugins() -> None:
    """List loaded plugins and the hooks each implements."""
    from rich.table import Table

    pm = get_plugin_manager()
    t = Table("plugin", "module", "hooks")
    for row in plugin_summary(pm):
        t.add_row(str(row["name"]), str(row["module"]), ", ".join(row["hooks"]))
    Console().print(t)


@click.group()
def sim() -> None:
    """The built-in simulated engine."""


@sim.command("serve")
@click.option("--profile", default="demo", show_default=True, help="a built-in profile name or a TOML/JSON file")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
def sim_serve(profile, host, port) -> None:
    """Serve the OpenAI API from the simulated engine."""
    from infermatrix.plugins.sim.profile import load_profile
    from infermatrix.plugins.sim.server import serve

    try:
        prof = load_profile(profile)
    except ConfigError as exc:
        fail(str(exc))
    serve(prof, host=host, port=port)


COMMANDS = [plugins, sim]
