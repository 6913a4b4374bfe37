"""``infermatrix sim serve``: the simulated engine as a server of its own (registered by the sim plugin)."""

from __future__ import annotations

import sys

import click

__all__ = ["sim"]


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


@click.group()
def sim() -> None:
    """The built-in simulated engine."""


@sim.command("serve")
@click.option("--profile", default="demo", show_default=True, help="a built-in profile name or a TOML/JSON file")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--max-num-seqs", type=int, default=None, help="admit at most this many requests at once (the rest wait)")
@click.option("--metric-prefix", default=None, help='prefix of every /metrics family (default "vllm:")')
@click.option("--metric-name", "metric_names", multiple=True, metavar="ROLE=NAME",
              help="serve one metric family under NAME, e.g. running=toy:running (roles: see docs/sim.md)")
def sim_serve(profile, host, port, max_num_seqs, metric_prefix, metric_names) -> None:
    """Serve the OpenAI API from the simulated engine."""
    from infermatrix.plugin import ConfigError
    from infermatrix.plugins.sim.profile import load_profile
    from infermatrix.plugins.sim.server import serve

    try:
        prof = load_profile(profile)
        changes: dict = {}
        if max_num_seqs is not None:
            changes["max_num_seqs"] = max_num_seqs
        if metric_prefix is not None:
            changes["metric_prefix"] = metric_prefix
        if metric_names:
            names = dict(prof.metric_names)
            for item in metric_names:
                role, sep, name = item.partition("=")
                if not sep or not role or not name:
                    raise ConfigError(f"--metric-name {item!r}: expected ROLE=NAME, e.g. running=toy:running")
                names[role.strip()] = name.strip()
            changes["metric_names"] = names
        if changes:
            prof = load_profile({**prof.model_dump(mode="json"), **changes})
    except ConfigError as exc:
        _fail(str(exc))
    serve(prof, host=host, port=port)
