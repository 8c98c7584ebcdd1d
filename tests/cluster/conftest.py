"""One two-node Ray cluster on this machine for every test in tests/cluster (package scope).

Each node declares 2 GPUs as a resource (Ray hands out GPU ids 0 and 1 on each) while the work
runs on CPU: the drivers started here set engine/driver/cluster.py's test-only switch
PPODECK_TEST_RAY_GPUS. The head runs the dashboard, so the Ray Jobs API is there too. The
cluster is the tests' own: it is shut down at the end, and the address file Ray writes for
`ray.init()` is put back as it was at once, so nothing joins this cluster by accident.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE_SGLANG = Path(__file__).resolve().parent / "fake_sglang"
NODE_CPUS, NODE_GPUS = 4, 2


@dataclass(frozen=True)
class TestCluster:
    address: str        # GCS address for ray.init / RAY_ADDRESS
    dashboard_url: str  # http://127.0.0.1:PORT for the Jobs API
    node_ids: tuple[str, ...]


@contextmanager
def two_node_cluster() -> Iterator[TestCluster]:
    """A head (with the dashboard) and a worker node on 127.0.0.1; also used by bench/."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray._private.utils import get_ray_address_file, write_ray_address
    from ray.cluster_utils import Cluster

    from ppodeck.engine.driver.cluster import free_port, loopback_only

    loopback_only()  # both nodes and every process on 127.0.0.1, nothing on the network
    address_file = Path(get_ray_address_file(None))
    previous = address_file.read_text() if address_file.is_file() else None
    # Cluster.add_node writes the machine-wide address file whatever temp_dir says; on a fresh
    # machine its folder (/tmp/ray) does not exist yet
    address_file.parent.mkdir(parents=True, exist_ok=True)
    # its own temp dir: the Jobs supervisor finds its cluster through the address file there
    # (RAY_ADDRESS for the entrypoint); the machine-wide one is put back as it was
    temp_dir = tempfile.mkdtemp(prefix="ppdrc-", dir="/tmp")  # short: socket paths live here
    dashboard_port = free_port()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": NODE_CPUS, "num_gpus": NODE_GPUS, "node_ip_address": "127.0.0.1",
        "include_dashboard": True, "dashboard_host": "127.0.0.1", "temp_dir": temp_dir,
        "dashboard_port": dashboard_port, "object_store_memory": 200 << 20,
        # not Ray's fixed 52365: another Ray on this machine would leave the Jobs API without
        # an agent ("No available agent to submit job")
        "dashboard_agent_listen_port": free_port()})
    try:
        write_ray_address(cluster.address, temp_dir)
        restore(address_file, previous)
        worker = cluster.add_node(num_cpus=NODE_CPUS, num_gpus=NODE_GPUS, temp_dir=temp_dir,
                                  node_ip_address="127.0.0.1", object_store_memory=200 << 20)
        cluster.wait_for_nodes()
        yield TestCluster(cluster.address, f"http://127.0.0.1:{dashboard_port}",
                          (cluster.head_node.node_id, worker.node_id))
    finally:
        cluster.shutdown()
        restore(address_file, previous)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[TestCluster]:
    with two_node_cluster() as cluster:
        yield cluster


def restore(address_file: Path, previous: str | None) -> None:
    """Put back the address file as it was before our head node wrote its own address."""
    if previous is None:
        address_file.unlink(missing_ok=True)
    else:
        address_file.write_text(previous)


def worker_env() -> dict[str, str]:
    """runtime_env env_vars for in-process tests: the repo and the fake sglang importable."""
    return {"PYTHONPATH": f"{FAKE_SGLANG}:{REPO}", "RAY_AUTH_MODE": "disabled"}


@pytest.fixture(scope="module")
def joined(ray_cluster: TestCluster) -> Iterator[object]:
    """This test module's driver connected to the cluster (the ray module), disconnected after."""
    import ray

    ray.init(address=ray_cluster.address, runtime_env={"env_vars": worker_env()},
             log_to_driver=False)
    yield ray
    ray.shutdown()


def driver_env(address: str | None = None) -> dict[str, str]:
    """For a driver subprocess that joins the test cluster: loopback mode (its node IP must
    be the cluster's 127.0.0.1), GPUs asked of Ray while computing on CPU."""
    env = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PPODECK_TEST_RAY_GPUS": "1",
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    if address:
        env["RAY_ADDRESS"] = address
    return env
