"""MFU per train phase (engine/driver/mfu.py): model FLOPs over the phase's seconds, against the
GPU's peak when the machine kind names a known GPU."""

from __future__ import annotations

import pytest

from ppodeck.engine.driver.mfu import mfu_metrics, phase_flops

ARGS = {"with_ref": False, "world_size": 1}


def test_flops_count_forward_passes_and_the_update() -> None:
    assert phase_flops(ARGS, 1000, 10, "critic") == 2 * 1000 * 10 + 6 * 1000 * 10
    with_ref = phase_flops({**ARGS, "with_ref": True}, 1000, 10, "actor")
    assert with_ref == 2 * 1000 * 10 * 2 + 6 * 1000 * 10


def test_mfu_on_a_known_gpu_and_only_tflops_on_cpu() -> None:
    spent = {"critic": 2.0, "actor": 4.0}
    on_gpu = mfu_metrics(ARGS, 600_000_000, 64 * 272, spent, "gpu: NVIDIA H200 x1")
    achieved = phase_flops(ARGS, 600_000_000, 64 * 272, "actor") / 4.0
    assert on_gpu["perf/actor_train_tflops"] == pytest.approx(achieved / 1e12)
    assert on_gpu["perf/actor_train_mfu"] == pytest.approx(achieved / 989e12)
    two = mfu_metrics({**ARGS, "world_size": 2}, 600_000_000, 64 * 272, spent,
                      "gpu: NVIDIA H200 x2")
    assert two["perf/actor_train_mfu"] == pytest.approx(on_gpu["perf/actor_train_mfu"] / 2)
    on_cpu = mfu_metrics(ARGS, 600_000_000, 64 * 272, spent, "cpu: AMD EPYC x2")
    assert set(on_cpu) == {"perf/critic_train_tflops", "perf/actor_train_tflops"}
    assert mfu_metrics(ARGS, None, 100, spent, "cpu: x") == {}
