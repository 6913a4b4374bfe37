"""issue 27 item 10: a usage mistake in ANY command (a value not among a click.Choice's, an unknown option or command,
a nested group's command) is one `error:` line naming the command's --help, exit 2 — not click's 4-line usage block.
Through the real top-level group, in-process (click's runner: no process started)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from infermatrix.cli import _add_builtin_commands, cli
from infermatrix.cli.run_cmd import run
from infermatrix.core.plugins import get_plugin_manager


@pytest.fixture(scope="module")
def program():
    _add_builtin_commands()
    get_plugin_manager().hook.register_commands(cli=cli)  # as main() does: the sim's group is a plugin's
    return cli


@pytest.mark.parametrize(
    "args, says",
    [
        (["report", "--format", "pdf"], "Invalid value for '--format': 'pdf' is not one of 'text', 'markdown', 'html', 'json'. (see infermatrix report --help)"),
        (["compare", "a", "b", "--format", "pdf"], "(see infermatrix compare --help)"),
        (["sql", "--format", "xml", "SELECT 1"], "'xml' is not one of 'table', 'csv', 'json'"),
        (["export", "--nope"], "No such option '--nope'"),
        (["search", "--over", "speed", "--slo", "ttft_p99_ms=1"], "'speed' is not one of 'rate', 'concurrency'"),
        (["sim", "serve", "--port", "abc"], "'abc' is not a valid integer. (see infermatrix sim serve --help)"),
        (["nosuch"], "No such command 'nosuch'. (see infermatrix --help)"),
    ],
)
def test_a_usage_mistake_is_one_line_exit_2(program, tmp_path, args, says):
    result = CliRunner().invoke(program, args)
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.output


def test_help_and_a_command_on_its_own_keep_their_words(program):
    assert CliRunner().invoke(program, ["report", "--help"]).exit_code == 0
    alone = CliRunner().invoke(run, ["--api", "soap"])  # a command invoked on its own still names itself
    assert alone.exit_code == 2 and "(see infermatrix run --help)" in alone.output, alone.output
