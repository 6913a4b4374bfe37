"""``infermatrix sim serve``: the simulated engine as a server of its own (registered by the sim plugin)."""

from __future__ import annotations

import sys

import click

__all__ = ["sim"]


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def _pairs(flag: str, items: tuple[str, ...], start: dict[str, str], example: str) -> dict[str, str]:
    """``ROLE=NAME`` options over the profile's table."""
    from infermatrix.plugin import ConfigError

    out = dict(start)
    for item in items:
        role, sep, name = item.partition("=")
        if not sep or not role.strip() or not name.strip():
            raise ConfigError(f"{flag} {item!r}: expected ROLE=NAME, e.g. {example}")
        out[role.strip()] = name.strip()
    return out


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
@click.option("--capacity-gauge", "capacity_gauges", multiple=True, metavar="ROLE=NAME",
              help="also publish capacity as a plain gauge: kv_tokens=NAME and/or max_seqs=NAME")
@click.option("--no-tokenize", is_flag=True, help="serve no /tokenize endpoint (a server without one)")
def sim_serve(profile, host, port, max_num_seqs, metric_prefix, metric_names, capacity_gauges, no_tokenize) -> None:
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
            changes["metric_names"] = _pairs("--metric-name", metric_names, prof.metric_names, "running=toy:running")
        if capacity_gauges:
            changes["capacity_gauges"] = _pairs("--capacity-gauge", capacity_gauges, prof.capacity_gauges, "kv_tokens=toy:kv_cache_tokens")
        if no_tokenize:
            changes["tokenize"] = False
        if changes:
            prof = load_profile({**prof.model_dump(mode="json"), **changes})
    except ConfigError as exc:
        _fail(str(exc))
    serve(prof, host=host, port=port)
