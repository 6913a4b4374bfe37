"""The ``infermatrix`` command line (DESIGN §5). User mistakes are one line on stderr and exit code 2.

Each sub-command lives in its own module; plugins add more through the ``register_commands`` hook.
"""

from __future__ import annotations

import sys

import click

from infermatrix import __version__
from infermatrix.cli.common import EXIT_INTERRUPTED, OneLineGroup
from infermatrix.core.plugins import get_plugin_manager

__all__ = ["main", "cli"]


@click.group(cls=OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="infermatrix")
def cli() -> None:
    """Benchmark LLM inference engines and compare them side by side."""



def _add_builtin_commands() -> None:
    from infermatrix.cli import import_cmds, misc_cmds, results_cmds, run_cmd, search_cmd, sweep_cmd, tune_cmd

    for module in (run_cmd, search_cmd, sweep_cmd, tune_cmd, results_cmds, import_cmds, misc_cmds):
        for command in module.COMMANDS:
            cli.add_command(command)


def main() -> None:
    from infermatrix.cli.common import fail
    from infermatrix.core.plugins import PluginError

    _add_builtin_commands()
    try:
        pm = get_plugin_manager()
    except PluginError as exc:  # a third-party plugin installed wrongly: one line, whatever the command
        fail(str(exc))
    pm.hook.register_commands(cli=cli)
    try:
        cli.main(standalone_mode=True)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
