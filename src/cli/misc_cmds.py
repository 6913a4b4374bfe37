"""``plugins`` (``sim serve`` is the sim plugin's own command, added through ``register_commands``)."""

from __future__ import annotations

import click

from infermatrix.cli.common import out_console
from infermatrix.core.plugins import get_plugin_manager, plugin_summary


@click.command()
def plugins() -> None:
    """List loaded plugins, the engine kinds each registers and the hooks each implements."""
    from rich.table import Table

    pm = get_plugin_manager()
    t = Table("plugin", "module", "engines", "hooks")
    for row in plugin_summary(pm):
        t.add_row(str(row["name"]), str(row["module"]), ", ".join(row["engines"]), ", ".join(row["hooks"]))
    out_console().print(t)


COMMANDS = [plugins]
