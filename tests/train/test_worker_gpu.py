"""Trainer ranks on one CUDA GPU: bf16 + fp32 master weights, real offload (sleep/wake_up).

Run on the GPU machine: `python -m pytest tests/train/test_worker_gpu.py -m gpu -q`.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.train.worker_harness import all_values, run_ranks, tiny_args, tiny_batch

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _offload_round(rank: int, world: int, ports: list[int]) -> dict:
    """Twin critics: one sleeps and wakes between two rollouts, one does not. Same numbers."""
    from ppodeck.engine.train.worker import train_worker

    args, batch = tiny_args(), tiny_batch()
    out: dict[str, Any] = {}
    for name, port, offload in (("plain", ports[0], False), ("slept", ports[1], True)):
        critic = train_worker("critic", rank, world, "127.0.0.1", port, args)
        critic.init()
        first = critic.train_critic(0, batch)
        if offload:
            before = torch.cuda.memory_allocated()
            state = critic.gather_full_state_dict()
            out["sleep"] = critic.sleep()
            out["asleep_allocated"] = torch.cuda.memory_allocated()
            out["awake_allocated"] = before
            out["wake"] = critic.wake_up()
            out["state_equal"] = all(torch.equal(state[k], v)
                                     for k, v in critic.gather_full_state_dict().items())
        second = critic.train_critic(1, batch)
        out[name] = {"first": first["step_metrics"], "second": second["step_metrics"],
                     "dtype": str(next(critic.model.parameters()).dtype)}
        out["values"] = all_values(first["values"])
        out["memory"] = critic.memory()
        critic.shutdown()
    actor = train_worker("actor", rank, world, "127.0.0.1", ports[2], args)
    actor.init()
    out["actor"] = actor.train_actor(0, batch, out["values"])["step_metrics"]
    out["actor_sleep"], out["actor_wake"] = actor.sleep(), actor.wake_up()
    out["actor_again"] = actor.train_actor(1, batch, out["values"])["step_metrics"]
    awake_export = actor.export_hf_weights() or {}
    actor.sleep()
    asleep_export = actor.export_hf_weights() or {}  # wakes for the gather, then sleeps again
    out["asleep_after_export"] = actor._offloader.asleep
    out["export_equal"] = all(torch.equal(awake_export[k], v) for k, v in asleep_export.items())
    out["hf"] = {k: v.dtype for k, v in awake_export.items()}
    actor.shutdown()
    return out


@pytest.fixture(scope="module")
def gpu_round(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_ranks(1, _offload_round, tmp_path_factory.mktemp("gpu"), ports=3)[0]


def test_bf16_params_on_cuda(gpu_round: dict) -> None:
    assert gpu_round["plain"]["dtype"] == "torch.bfloat16"
    assert gpu_round["memory"]["cuda"]["allocated_bytes"] > 0


def test_sleep_frees_device_memory_and_wake_restores_it(gpu_round: dict) -> None:
    sleep, wake = gpu_round["sleep"], gpu_round["wake"]
    assert sleep["noop"] is False and sleep["where"] == "cpu" and sleep["bytes"] > 0
    assert wake["where"] == "gpu" and wake["bytes"] == sleep["bytes"]
    freed = gpu_round["awake_allocated"] - gpu_round["asleep_allocated"]
    assert freed >= sleep["freed_bytes"] * 0.9
    assert gpu_round["state_equal"]


def test_training_after_wake_matches_training_without_sleep(gpu_round: dict) -> None:
    plain, slept = gpu_round["plain"], gpu_round["slept"]
    for a, b in zip(plain["second"], slept["second"], strict=True):
        assert b["train/critic-value_loss"] == pytest.approx(a["train/critic-value_loss"],
                                                             rel=1e-6)


def test_actor_trains_across_sleep(gpu_round: dict) -> None:
    assert gpu_round["actor_sleep"]["noop"] is False
    for step in gpu_round["actor"] + gpu_round["actor_again"]:
        assert torch.isfinite(torch.tensor(step["train/loss"]))
    assert gpu_round["hf"]["model.embed_tokens.weight"] == torch.bfloat16


def test_export_while_asleep_gives_the_same_weights_and_stays_asleep(gpu_round: dict) -> None:
    assert gpu_round["export_equal"] and gpu_round["asleep_after_export"]
