"""The toy plugin's own test: the plugin and the testing kit ``infermatrix.testing``, nothing else."""

import infermatrix_toy
from infermatrix.testing import run_matrix, sim_server

TOY_NAMES = {
    "running": "toy:running",
    "waiting": "toy:waiting",
    "generated_tokens": "toy:generated_tokens",
    "cache_config": "toy:cache_config",
}


def test_toy_reads_its_own_metrics():
    # A sim playing toy: toy's metric names, at most 2 requests running at once.
    with sim_server("tiny", metric_prefix="toy:", metric_names=TOY_NAMES, max_num_seqs=2) as sim:
        result = run_matrix({"kind": "toy", "base_url": sim.base_url}, plugins=[infermatrix_toy], matrix={"concurrency": [1, 4]})
    assert result.status == "completed", result.error
    run = result.run()
    assert run["engine"] == "toy"
    assert run["capacity_source"].startswith("toy:cache_config")  # ToyEngine.read_capacity answered
    one, four = result.cells()
    assert one["status"] == "valid" and one["flags"]["steady_state"]["engine_metrics"] is True
    assert one["flags"]["tokens"]["agree"] is True  # reconciled against toy:generated_tokens
    assert four["status"] == "admission_limited" and four["flags"]["achieved_concurrency"] == 2
