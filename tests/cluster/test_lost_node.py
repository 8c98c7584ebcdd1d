"""A node holding the run's workers is lost mid-run: the run ends failed within a minute naming
the node and the role it held, the events written so far are intact, and `run --resume`
continues from the last save to the same losses as the run gave before the loss.

Its own two-node CPU cluster (ray.cluster_utils.Cluster), not the package's: the test removes
a node. The head declares no GPUs and the worker node 2, so the run's placement group (GPUs
asked of Ray by the test-only switch, work done on CPU) lands wholly on the worker node, and the
driver stays on the head. tiny-cpu with a save every 2 rollouts; the node is removed once
rollout 5's critic phase starts (the last save is rollout 3's; rollout 4's events, complete,
are what the resumed rollout 4 must reproduce). Slow: a cluster and two driver runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ppodeck.engine.launch.local import prepare_resume, prepare_run, start_driver
from ppodeck.engine.presets import load_preset, resolve_preset
from ppodeck.engine.run.events import read_events
from ppodeck.engine.run.rundir import RunDir, read_status
from tests.cluster.conftest import NODE_CPUS, driver_env, restore
from tests.reliability import helpers
from tests.reliability.test_driver_kill import first_resumed_losses

pytestmark = pytest.mark.slow

SAVE_INTERVAL = 2
LOSE_AT = 5  # rollouts 1 and 3 are saved; rollout 4 runs to its end before the loss
RESUMED_TOTAL = 6
FAILED_WITHIN_S = 60


def _critic_phase_started(rundir: RunDir, rollout_id: int) -> bool:
    return any(e["kind"] == "phase" and e["name"] == "critic_train" and e["state"] == "start"
               and e.get("rollout_id") == rollout_id for e in helpers.events(rundir))


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import tempfile

    from ray._private.utils import get_ray_address_file, write_ray_address
    from ray.cluster_utils import Cluster

    from ppodeck.engine.driver.cluster import loopback_only

    loopback_only()
    address_file = Path(get_ray_address_file(None))
    previous = address_file.read_text() if address_file.is_file() else None
    address_file.parent.mkdir(parents=True, exist_ok=True)
    temp_dir = tempfile.mkdtemp(prefix="ppdln-", dir="/tmp")
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": NODE_CPUS, "num_gpus": 0, "node_ip_address": "127.0.0.1",
        "include_dashboard": False, "temp_dir": temp_dir, "object_store_memory": 200 << 20})
    try:
        write_ray_address(cluster.address, temp_dir)
        restore(address_file, previous)
        yield cluster, temp_dir
    finally:
        cluster.shutdown()
        restore(address_file, previous)
        import shutil

        shutil.rmtree(temp_dir, ignore_errors=True)


def _add_gpu_node(cluster: Any, temp_dir: str) -> Any:  # noqa: ANN401 - a ray Node
    node = cluster.add_node(num_cpus=NODE_CPUS, num_gpus=2, temp_dir=temp_dir,
                            node_ip_address="127.0.0.1", object_store_memory=200 << 20)
    cluster.wait_for_nodes()
    return node


def _wait(proc: Any, timeout: float) -> None:  # noqa: ANN401 - a Popen
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)  # the driver we started, by its process group
            proc.wait()


@pytest.fixture(scope="module")
def lost(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    ray_cluster, temp_dir = cluster
    node = _add_gpu_node(ray_cluster, temp_dir)
    config = resolve_preset(load_preset("tiny-cpu")).with_values(
        num_rollout=40, save="${RUN_DIR}/checkpoints", save_interval=SAVE_INTERVAL)
    rundir = prepare_run(config, "tiny-cpu", run_dir=tmp_path_factory.mktemp("lost") / "run")
    started = time.monotonic()
    proc = start_driver(rundir, env=driver_env(ray_cluster.address))
    try:
        helpers.wait_until(lambda: _critic_phase_started(rundir, LOSE_AT), 400,
                           f"rollout {LOSE_AT}'s critic phase")
        events_before = helpers.events(rundir)
        ray_cluster.remove_node(node, allow_graceful=False)
        lost_at = time.monotonic()
        status = helpers.wait_final(rundir, FAILED_WITHIN_S + 30)
        failed_after = time.monotonic() - lost_at
    finally:
        _wait(proc, 60)
    return {"rundir": rundir, "config": config, "node_id": node.node_id, "status": status,
            "failed_after": failed_after, "events_before": events_before,
            "first_run_s": time.monotonic() - started}


def test_the_run_ends_failed_within_a_minute_naming_the_node_and_role(lost) -> None:
    status = lost["status"]
    assert status["state"] == "failed", status
    assert lost["failed_after"] < FAILED_WITHIN_S, lost["failed_after"]
    detail = status["detail"]
    assert lost["node_id"][:12] in detail, detail
    assert any(role in detail for role in ("critic", "actor", "rollout")), detail
    assert "node" in detail and "lost" in detail, detail


def test_the_events_written_before_the_loss_are_intact(lost) -> None:
    events, warnings = read_events(lost["rundir"].events_jsonl)
    assert warnings == []
    before = lost["events_before"]
    assert events[:len(before)] == before
    assert any(e["kind"] == "status" and e.get("state") == "failed" for e in events)


def test_resume_continues_from_the_last_save_to_the_same_losses(lost, cluster) -> None:
    ray_cluster, temp_dir = cluster
    _add_gpu_node(ray_cluster, temp_dir)  # the lost node's replacement
    rundir: RunDir = lost["rundir"]
    config = lost["config"].with_values(num_rollout=RESUMED_TOTAL)
    assert prepare_resume(rundir, config) == 4
    started = time.monotonic()
    proc = start_driver(rundir, env=driver_env(ray_cluster.address))
    _wait(proc, 400)
    status = read_status(rundir)
    assert status["state"] == "succeeded", (status, rundir.driver_log.read_text()[-3000:])
    events, warnings = read_events(rundir.events_jsonl)
    assert warnings == []
    steps = [e["step"] for e in events
             if e["kind"] == "metrics" and e["step_key"] == "rollout/step"]
    assert steps == list(range(RESUMED_TOTAL)), steps
    superseded = read_events(rundir.path / "events.superseded.jsonl")[0]
    assert first_resumed_losses(events, 4) == pytest.approx(
        first_resumed_losses(superseded, 4), rel=1e-4, abs=1e-7)
    print(f"lost node: first run {lost['first_run_s']:.0f} s, failed "
          f"{lost['failed_after']:.1f} s after the loss, resume "
          f"{time.monotonic() - started:.0f} s")
