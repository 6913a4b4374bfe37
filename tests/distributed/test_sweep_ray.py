"""``infermatrix sweep --ray`` on a real local Ray cluster (``ray.cluster_utils.Cluster``): a head without the
"gpu" resource and two worker nodes with one "gpu" each (a CPU custom resource standing in for a GPU), the
sim as the engine, the real command line as a driver connecting to the cluster.

Checked: 4 configs over the 2 nodes land 4 runs in one DuckDB, spread over both nodes; a node removed while
its run is measuring loses only that run, which the database records under its id and ``infermatrix resume``
completes. The cluster is shut down after the module and none of its processes may be left.

Ray missing: skipped on a developer's machine, a FAILURE under CI=true (the test extra lists ray).
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import psutil
import pytest
from imxtest import processes_mentioning, run_cli
from reliability.rel_helpers import Cli
from sweep_helpers import need_ray, rows, runs_by_name, sim_config

pytestmark = [pytest.mark.slow, pytest.mark.holds("ray")]  # local Ray clusters: two side by side break each other (tests/solo.py)

GPU_NODES = 2
STARTED = re.compile(r"run (\w{8}) \((\S+)\) started on .* node id (\w+)")


@pytest.fixture(scope="module")
def cluster():
    try:  # imported here, not at collection: `import ray` costs a second or two, and the fast loop collects this file
        from ray.cluster_utils import Cluster
    except ImportError:
        need_ray(None)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    t0 = time.monotonic()
    before = set(psutil.Process().children(recursive=True))  # another module's cluster, if one were alive, is not ours
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(GPU_NODES):
        c.add_node(num_cpus=1, resources={"gpu": 1})
    c.wait_for_nodes()
    c.start_s = time.monotonic() - t0  # type: ignore[attr-defined]
    print(f"\nlocal Ray cluster (head + {GPU_NODES} gpu nodes) up in {c.start_s:.1f} s")  # type: ignore[attr-defined]
    ours: set[psutil.Process] = set()
    try:
        yield c
    finally:
        ours.update(set(psutil.Process().children(recursive=True)) - before)
        c.shutdown()
        gone, alive = psutil.wait_procs(list(ours), timeout=30)
        left = [f"{p.pid} {' '.join(p.cmdline()[:4])}" for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        for p in alive:
            p.kill()
        assert not left, f"Ray processes left after the cluster's shutdown: {left}"


def _sweep_args(cluster, tmp_path: Path, configs: list[Path]) -> list[str]:
    return ["sweep", *map(str, configs), "--ray", "--ray-address", cluster.address, "--gpu-resource", "gpu",
            "--node-dir", str(tmp_path / "nodes"), "--db", str(tmp_path / "sweep.duckdb")]  # fmt: skip


def _no_engine_left(tmp_path: Path) -> None:
    """Every engine the sweep launched (their command lines name the node dir under tmp_path) is gone."""
    deadline = time.monotonic() + 30
    while processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes_mentioning(str(tmp_path)), processes_mentioning(str(tmp_path))


def test_four_configs_over_two_nodes_land_four_runs_in_one_database(cluster, tmp_path):
    configs = [sim_config(tmp_path / f"c{i}.toml", f"c{i}", [1, 2]) for i in range(4)]
    t0 = time.monotonic()
    proc = run_cli(*_sweep_args(cluster, tmp_path, configs), cwd=tmp_path, timeout=280)
    print(f"\nRay sweep of 4 runs over {GPU_NODES} nodes: {time.monotonic() - t0:.1f} s (cluster start {cluster.start_s:.1f} s)")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    db = tmp_path / "sweep.duckdb"
    runs = runs_by_name(db)
    assert sorted(runs) == ["c0", "c1", "c2", "c3"], runs
    assert all(r["status"] == "completed" and r["cells"] == {"valid": 2} for r in runs.values()), runs
    assert rows(db, "SELECT count(DISTINCT run_id), count(*) > 0 FROM requests") == [(4, True)]
    nodes = {m[3] for m in STARTED.finditer(out)}
    assert len(nodes) == GPU_NODES, out[-4000:]  # spread over both gpu nodes, none on the head (it has no "gpu")
    for r in runs.values():  # the engine's files came back next to the caller's database
        assert (tmp_path / "sweep.runs" / r["run_id"] / "sim-profile.json").is_file()
    assert not list((tmp_path / "nodes").iterdir())  # the node-local databases are removed once shipped
    _no_engine_left(tmp_path)


def test_a_run_no_node_can_hold_is_one_line_not_a_hang(cluster, tmp_path):
    cfg = sim_config(tmp_path / "a.toml", "a", [1])
    args = _sweep_args(cluster, tmp_path, [cfg])
    for extra, says in ((["--gpus-per-run", "2"], "no node of the Ray cluster has 2 gpu (the most on one node: 1"),
                        (["--gpu-resource", "h200"], "no node of the Ray cluster has 1 h200")):  # fmt: skip
        proc = run_cli(*_swap(args, extra), cwd=tmp_path, timeout=120)
        assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert rows(tmp_path / "sweep.duckdb", "SELECT count(*) FROM runs") == [(0,)]


def _swap(args: list[str], extra: list[str]) -> list[str]:
    """The sweep's arguments with ``extra``'s option replacing the one given (or added)."""
    out = list(args)
    if extra[0] in out:
        out[out.index(extra[0]) + 1] = extra[1]
    else:
        out += extra
    return out


def _first_cell_stored(tmp_path: Path, run_id: str) -> bool:
    """The run's console log on its node says a cell is stored: it is mid-run."""
    return any("decode 1K × 1 " in p.read_text() for p in (tmp_path / "nodes").glob(f"*{run_id}*/console.log"))


def test_ctrl_c_stops_the_runs_on_the_nodes_and_keeps_what_they_measured(cluster, tmp_path):
    configs = [sim_config(tmp_path / f"i{i}.toml", f"i{i}", [1, 2, 4, 8], duration_s=3.0) for i in range(3)]
    t0 = time.monotonic()
    sweep = Cli(*_sweep_args(cluster, tmp_path, configs), cwd=tmp_path, name="sweep")
    try:
        started = sweep.wait_for(lambda: {m[1] for m in STARTED.finditer(sweep.stderr)} if len(STARTED.findall(sweep.stderr)) == 2 else None,
                                 "two runs started", timeout=120)  # fmt: skip
        sweep.wait_for(lambda: all(_first_cell_stored(tmp_path, rid) for rid in started), "a cell stored by each run", timeout=120)
        sweep.signal(signal.SIGINT)
        sent_s = time.monotonic() - t0
        code = sweep.wait(120)
    finally:
        if sweep.proc.poll() is None:
            sweep.kill_tree()
    assert code == 130, f"Ctrl-C sent {sent_s:.1f} s after the sweep started\n" + (sweep.stdout + sweep.stderr)[-4000:]
    runs = runs_by_name(tmp_path / "sweep.duckdb")
    assert {r["run_id"] for r in runs.values()} == started, runs  # the queued third never started
    assert all(r["status"] == "interrupted" and r["cells"].get("valid", 0) >= 1 for r in runs.values()), runs
    assert "not started" in sweep.stdout and "i2.toml" in sweep.stdout, sweep.stdout
    _no_engine_left(tmp_path)


def test_a_node_lost_mid_run_loses_only_its_run_which_resume_completes(cluster, tmp_path):
    # Longer runs: 4 cells, so the node can be removed once its run has stored one (the test's last: it removes a node).
    configs = [sim_config(tmp_path / f"k{i}.toml", f"k{i}", [1, 2, 4, 8]) for i in range(4)]
    t0 = time.monotonic()
    sweep = Cli(*_sweep_args(cluster, tmp_path, configs), cwd=tmp_path, name="sweep")
    try:
        first = sweep.wait_stderr(STARTED.pattern, timeout=120)
        victim_run, victim_node = first[1], first[3]
        sweep.wait_for(lambda: _first_cell_stored(tmp_path, victim_run), "the victim's first cell", timeout=120)
        node = next(n for n in cluster.worker_nodes if n.node_id == victim_node)
        cluster.remove_node(node)
        code = sweep.wait(240)
    finally:
        if sweep.proc.poll() is None:
            sweep.kill_tree()
    sweep_s = time.monotonic() - t0
    print("\n" + "\n".join(ln for ln in sweep.stderr.splitlines() if " s] " in ln))  # the sweep's own timeline
    out = sweep.stdout + sweep.stderr
    assert code == 1, out[-4000:]
    db = tmp_path / "sweep.duckdb"
    runs = runs_by_name(db)
    assert len(runs) == 4, runs
    lost = [name for name, r in runs.items() if r["status"] != "completed"]
    assert [runs[n]["run_id"] for n in lost] == [victim_run], runs  # only the removed node's run
    assert runs[lost[0]]["status"] == "failed" and "lost with its Ray node" in runs[lost[0]]["error"], runs
    assert runs[lost[0]]["cells"] == {}, runs  # its cells were in the lost node's database
    assert all(r["cells"] == {"valid": 4} for n, r in runs.items() if n not in lost), runs
    assert "lost" in sweep.stdout and f"infermatrix resume {victim_run}" in sweep.stdout, sweep.stdout
    _no_engine_left(tmp_path)  # the engine on the removed node went down with its worker

    t1 = time.monotonic()
    resumed = run_cli("resume", victim_run, "--db", str(db), cwd=tmp_path, timeout=180)
    print(f"\nsweep with a node removed: {sweep_s:.1f} s; resume of the lost run: {time.monotonic() - t1:.1f} s")
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    after = runs_by_name(db)
    assert all(r["status"] == "completed" and r["cells"] == {"valid": 4} for r in after.values()), after
    _no_engine_left(tmp_path)
