"""The tiny-cpu preset through Ray + Megatron-core + PPO for 3 rollouts with context parallelism
(CP2; TP1 x PP2 x CP2, the seed's topology; TP2 x CP2 with --sequence-parallel): every train
metric of every step equals the one-rank run's (slow: one Ray run per topology)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.helpers import driver_log_tail, run_preset

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROLLOUTS = 3


def train_metrics(events: list[dict[str, Any]]) -> dict[str, float]:
    """Every logged train metric (but times) by role, rollout and step."""
    out = {}
    for e in events:
        if e["kind"] == "metrics" and e["step_key"] == "train/step":
            for name, value in e["metrics"].items():
                if not name.startswith("perf/") and value is not None:
                    out[f"{e.get('role')}:{e['rollout_id']}:{e['step']}:{name}"] = value
    return out


def rollout_metrics(events: list[dict[str, Any]]) -> dict[str, float]:
    """The rollout/* means (values, returns, advantages, log-probs) and the critic's EV."""
    out = {}
    for e in events:
        if e["kind"] == "metrics" and e["step_key"] == "rollout/step":
            for name, value in e["metrics"].items():
                if (name.startswith(("rollout/", "critic/")) and "time" not in name
                        and isinstance(value, float)):
                    out[f"{e['step']}:{name}"] = value
    return out


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    rundir, status, events = run_preset(tmp_path_factory.mktemp("cp1"), "tiny-cpu",
                                        timeout=600, num_rollout=ROLLOUTS)
    assert status["state"] == "succeeded", driver_log_tail(rundir)
    return events


@pytest.mark.parametrize("ranks, overrides", [
    (2, {"context_parallel_size": 2}),
    (4, {"pipeline_model_parallel_size": 2, "context_parallel_size": 2}),
    (4, {"tensor_model_parallel_size": 2, "context_parallel_size": 2,
         "sequence_parallel": True}),
], ids=["cp2", "pp2-cp2", "tp2-cp2-sp"])
def test_context_parallel_run_matches_one_rank(one_rank: list[dict[str, Any]], tmp_path,
                                               ranks: int, overrides: dict[str, Any]) -> None:
    rundir, status, events = run_preset(
        tmp_path, "tiny-cpu", timeout=800, num_rollout=ROLLOUTS, actor_num_gpus_per_node=ranks,
        num_gpus_per_node=ranks, **overrides)
    assert status["state"] == "succeeded", driver_log_tail(rundir)
    for expected, got in ((train_metrics(one_rank), train_metrics(events)),
                          (rollout_metrics(one_rank), rollout_metrics(events))):
        assert got.keys() == expected.keys() and expected
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
