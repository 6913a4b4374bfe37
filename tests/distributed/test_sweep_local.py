"""``infermatrix sweep`` without Ray: the configs run one after another into one database, a summary table
ends it, a failed run makes the exit code 1 without stopping the others, and Ctrl-C stops cleanly.

The fast tests drive the command in-process (click's runner) and start nothing."""

from __future__ import annotations

import signal
import sys

import pytest
from click.testing import CliRunner
from imxtest import free_port, processes_mentioning, run_cli
from reliability.rel_helpers import Cli
from sweep_helpers import need_ray, rows, runs_by_name, sim_config

from infermatrix.cli import _add_builtin_commands, cli
from infermatrix.core.run.sweep import LOST, NOT_STARTED, SweepEntry, summary_table, sweep_exit_code


def _invoke(*args: str):
    _add_builtin_commands()
    return CliRunner().invoke(cli, ["sweep", *args])


def test_ray_flags_without_ray_are_one_line_errors(tmp_path):
    cfg = sim_config(tmp_path / "a.toml", "a", [1])
    result = _invoke(str(cfg), "--gpus-per-run", "2", "--db", str(tmp_path / "s.duckdb"))
    assert result.exit_code == 2 and "--gpus-per-run: only with --ray" in result.output, result.output
    assert not (tmp_path / "s.duckdb").exists()  # nothing opened, nothing run


def test_a_bad_config_stops_the_sweep_before_anything_runs(tmp_path):
    good = sim_config(tmp_path / "a.toml", "a", [1])
    bad = tmp_path / "b.toml"
    bad.write_text('[engine]\nkind = "sim"\n[matrix]\nconcurrency = [0]\n')
    result = _invoke(str(good), str(bad), "--db", str(tmp_path / "s.duckdb"))
    assert result.exit_code == 2 and "b.toml" in result.output and "Traceback" not in result.output, result.output
    assert not (tmp_path / "s.duckdb").exists()
    twice = _invoke(str(good), str(good), "--db", str(tmp_path / "s.duckdb"))
    assert twice.exit_code == 2 and "given twice" in twice.output, twice.output


def test_ray_missing_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as without the extra
    cfg = sim_config(tmp_path / "a.toml", "a", [1])
    result = _invoke(str(cfg), "--ray", "--db", str(tmp_path / "s.duckdb"))
    assert result.exit_code == 2 and "pip install 'infermatrix[ray]'" in result.output, result.output
    assert "Traceback" not in result.output


def test_ray_missing_skips_here_and_fails_under_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="ray not installed"):
        need_ray(None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="ray is not installed under CI=true"):
        need_ray(None)
    need_ray(object())  # installed: nothing happens


def test_exit_code_says_the_worst_outcome():
    def entries(*statuses):
        return [SweepEntry("c.toml", None, f"{i:08x}", status=s) for i, s in enumerate(statuses)]  # type: ignore[arg-type]

    assert sweep_exit_code(entries("completed", "completed")) == 0
    assert sweep_exit_code(entries("completed", "failed")) == 1
    assert sweep_exit_code(entries("completed", LOST, "completed")) == 1
    assert sweep_exit_code(entries("completed", "interrupted", NOT_STARTED)) == 130
    assert sweep_exit_code(entries("failed", "interrupted")) == 130
    # issue 27 item 4: every run ended, but a search stopped without an answer
    assert sweep_exit_code(entries("completed", "stopped")) == 3
    assert sweep_exit_code(entries("stopped", "failed")) == 1


def test_summary_shows_config_paths_relative_and_unfolded(tmp_path, monkeypatch):
    """An absolute temp path used to fill the table and fold inside its cell ('…/test_ctrl_c_…/i' | '2.toml')."""
    from io import StringIO

    from rich.console import Console

    deep = tmp_path / "sub" / "i2.toml"
    monkeypatch.chdir(tmp_path)
    entries = [SweepEntry(str(deep), None, "abcdef123456"), SweepEntry("/elsewhere/x.toml", None, "0123456789ab")]  # type: ignore[arg-type]
    out = StringIO()
    Console(file=out, width=80).print(summary_table(None, entries, show_node=False))  # type: ignore[arg-type]  # no run in a db
    text = out.getvalue()
    assert "sub/i2.toml" in text, text  # relative to the working directory: tmp_path left out
    assert str(tmp_path) not in text and "/elsewhere/x.toml" in text and "(0123456789ab)" in text, text


@pytest.mark.slow
def test_two_runs_land_in_one_database_and_a_failed_one_does_not_stop_the_sweep(tmp_path):
    db = tmp_path / "sweep.duckdb"
    a = sim_config(tmp_path / "a.toml", "a", [1, 2])
    dead = tmp_path / "dead.toml"  # attach to a port where nothing answers: fails before its run exists
    dead.write_text(f'name = "dead"\n[engine]\nkind = "openai"\nbase_url = "http://127.0.0.1:{free_port()}"\nmodel = "m"\n'
                    '[matrix]\ncontexts = ["1K"]\nprefill_contexts = []\nconcurrency = [1]\nduration_s = 1.0\n')  # fmt: skip
    b = sim_config(tmp_path / "b.toml", "b", [1])
    proc = run_cli("sweep", str(a), str(dead), str(b), "--db", str(db), "--slo", "ttft_p99_ms=60000", "--gpu-hour-price", "2.5", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    runs = runs_by_name(db)
    assert set(runs) == {"a", "b"}, runs  # one database, the two runs that could run
    assert runs["a"]["status"] == runs["b"]["status"] == "completed"
    assert runs["a"]["cells"] == {"valid": 2} and runs["b"]["cells"] == {"valid": 1}, runs
    table = proc.stdout
    assert f"{runs['a']['run_id']}" in table and "2 valid" in table and "1 valid" in table, table
    assert "dead.toml" in table and "failed" in table and "is the server running" in table, table
    assert not processes_mentioning(str(tmp_path))
    # --slo and --gpu-hour-price are stored with both runs, and judge their cells as `run`'s do.
    ids = sorted(r["run_id"] for r in runs.values())
    assert rows(db, "SELECT DISTINCT run_id, slo FROM slo_limits ORDER BY 1") == [(i, "ttft_p99_ms=60000") for i in ids]
    assert rows(db, "SELECT run_id, gpu_hour_usd FROM run_costs ORDER BY 1") == [(i, 2.5) for i in ids]
    assert rows(db, "SELECT count(*), bool_and(meets) FROM slo_cells WHERE slo = 'ttft_p99_ms=60000'") == [(3, True)]


def test_a_missing_trace_file_stops_the_sweep_naming_its_config(tmp_path):
    """config.py reads no file: the sweep's preflight reads every trace before anything runs, and its one line
    names the config file as validate_config's errors do."""
    good = sim_config(tmp_path / "a.toml", "a", [1])
    bad = tmp_path / "b.toml"
    bad.write_text(good.read_text() + f'[[load]]\nkind = "trace"\npath = "{tmp_path / "none.jsonl"}"\n')
    result = _invoke(str(good), str(bad), "--db", str(tmp_path / "s.duckdb"))
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "Traceback" not in result.output, result.output
    assert "b.toml: load.0: trace file" in lines[0] and "none.jsonl does not exist" in lines[0], result.output
    assert not (tmp_path / "s.duckdb").exists()


def test_a_bad_slo_stops_the_sweep_before_anything_runs(tmp_path):
    cfg = sim_config(tmp_path / "a.toml", "a", [1])
    result = _invoke(str(cfg), "--slo", "ttft_p99=fast", "--db", str(tmp_path / "s.duckdb"))
    assert result.exit_code == 2 and "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "s.duckdb").exists()


@pytest.mark.slow
def test_ctrl_c_stops_the_run_in_progress_keeps_the_finished_one_and_starts_no_more(tmp_path):
    db = tmp_path / "sweep.duckdb"
    configs = [sim_config(tmp_path / "a.toml", "a", [1]), sim_config(tmp_path / "b.toml", "b", [1, 2, 4, 8], duration_s=3.0),
               sim_config(tmp_path / "c.toml", "c", [1])]  # fmt: skip
    sweep = Cli("sweep", *map(str, configs), "--db", str(db), cwd=tmp_path)
    try:
        sweep.wait_stderr(r"sweep 2/3[\s\S]*decode 1K × 1 ", timeout=120)  # the second run is measuring: a cell of it is stored
        sweep.signal(signal.SIGINT)
        assert sweep.wait(90) == 130, sweep.stderr[-3000:]
    finally:
        if sweep.proc.poll() is None:
            sweep.kill_tree()
    runs = runs_by_name(db)
    assert set(runs) == {"a", "b"}, runs  # c never started
    assert runs["a"]["status"] == "completed" and runs["b"]["status"] == "interrupted", runs
    assert runs["b"]["cells"].get("valid", 0) >= 1, runs  # its finished cells kept
    assert "not started" in sweep.stdout and "c.toml" in sweep.stdout and f"infermatrix resume {runs['b']['run_id']}" in sweep.stdout
    assert not processes_mentioning(str(tmp_path)), processes_mentioning(str(tmp_path))
    assert rows(db, "SELECT count(*) FROM runs WHERE status = 'running'") == [(0,)]
