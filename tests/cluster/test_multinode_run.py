"""tiny-cpu across both nodes of the test cluster: actor world size 4 (TP=2, DP=2) gives the
losses of the one-rank run. The driver joins through RAY_ADDRESS and asks Ray for GPUs (the
test-only switch) while every rank computes on CPU; ranks rendezvous on rank 0's node."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ppodeck.engine.launch.local import prepare_run, start_driver
from ppodeck.engine.presets import load_preset, resolve_preset
from ppodeck.engine.run.events import read_events
from ppodeck.engine.run.rundir import read_status
from tests.cluster.conftest import driver_env

# two drivers and 9 + 3 Ray workers: about 3 minutes on 2 cores, so out of the default run;
# bench/ray_jobs_bench.py runs this file (pytest -m slow tests/cluster/test_multinode_run.py)
pytestmark = pytest.mark.slow

ROLLOUTS = 3
# float32 sums in another order (TP splits the matmuls, DP averages two halves); measured by
# bench/ray_jobs_bench.py --multinode: 5.5e-6 relative at most over 28 losses
REL_TOL = 1e-4


def run_on_cluster(tmp: Path, address: str, **values) -> tuple[dict, list[dict], str]:
    config = resolve_preset(load_preset("tiny-cpu")).with_values(num_rollout=ROLLOUTS, **values)
    rundir = prepare_run(config, "tiny-cpu", run_dir=tmp)
    proc = start_driver(rundir, env=driver_env(address))
    try:
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    events, _ = read_events(rundir.events_jsonl)
    log = rundir.driver_log.read_text(errors="replace")[-3000:]
    return read_status(rundir), events, log


def losses(events: list[dict]) -> list[tuple[str, int, str, float]]:
    keys = ("train/critic-value_loss", "train/pg_loss", "train/entropy_loss")
    return [(e.get("role"), e["step"], k, e["metrics"][k]) for e in events
            if e["kind"] == "metrics" and e.get("step_key") == "train/step"
            for k in keys if e["metrics"].get(k) is not None]


@pytest.fixture(scope="module")
def runs(ray_cluster, tmp_path_factory):
    one = run_on_cluster(tmp_path_factory.mktemp("one"), ray_cluster.address)
    four = run_on_cluster(tmp_path_factory.mktemp("four"), ray_cluster.address,
                          actor_num_nodes=2, actor_num_gpus_per_node=2,
                          tensor_model_parallel_size=2)
    return one, four


def test_both_runs_succeed_on_the_cluster(runs):
    for status, _events, log in runs:
        assert status["state"] == "succeeded", log


def test_four_ranks_span_both_nodes(runs, ray_cluster):
    _status, events, _log = runs[1]
    (placed,) = [e for e in events if e["kind"] == "log" and e.get("slots")]
    assert {s["node_id"] for s in placed["slots"]} == set(ray_cluster.node_ids)
    assert [s["gpu_id"] for s in placed["slots"]] == [0, 1, 0, 1]
    assert any("joined the cluster" in e.get("msg", "") for e in events if e["kind"] == "log")


def test_tp2_dp2_losses_match_the_one_rank_run(runs):
    one, four = losses(runs[0][1]), losses(runs[1][1])
    assert len(one) == len(four) > 0
    for (role, step, key, a), (role4, step4, key4, b) in zip(one, four, strict=True):
        assert (role, step, key) == (role4, step4, key4)
        assert b == pytest.approx(a, rel=REL_TOL, abs=1e-5), (role, step, key)
