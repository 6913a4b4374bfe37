"""A local 3-node Ray cluster for the Ray-cell tests (one per module: ~6 s to start on 2 cores; shut down before
the sweep tests start a cluster of their own, so two never share the cores and each can check it left nothing).

Ray is in the `test` extra: missing, these tests skip on a developer's machine and FAIL under CI=true (a skip
in CI is a check that cannot fail; tests/imxtest.py ``in_ci``)."""

from __future__ import annotations

import time

import pytest
from raykit import require_ray

NODES = 3
OBJECT_STORE_BYTES = 80 * 1024 * 1024  # Ray's floor is 75 MiB; the tests ship only small records


@pytest.fixture(scope="module")
def ray_cluster():
    """The cluster's address; every node one CPU, so actors reserving one CPU land one per node."""
    require_ray()
    from ray.cluster_utils import Cluster

    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": OBJECT_STORE_BYTES, "include_dashboard": False})
    try:
        for _ in range(NODES - 1):
            cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE_BYTES)
        cluster.wait_for_nodes()
        print(f"\nray cluster of {NODES} nodes started in {time.monotonic() - t0:.1f} s")
        yield cluster.address
    finally:
        cluster.shutdown()
