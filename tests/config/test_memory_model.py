"""One memory model (#42): check()'s estimate and the driver's runtime plans (init's order in
engine/driver/roles.py, the overlapped moves in engine/driver/offload.py) come from
engine/config/memory.py, so a change there moves all of them."""

from __future__ import annotations

import os
import re

import pytest

from ppodeck.engine.config import check, resolve
from ppodeck.engine.config import memory as model
from ppodeck.engine.presets import load_preset, resolve_preset
from tests.conftest import GPU_MACHINE

GIB = 1 << 30


def _args(preset: str = "qwen3-0.6b-ppo-1gpu", **values: object) -> dict:
    config = resolve_preset(load_preset(preset))
    return dict(resolve(config.with_values(**values) if values else config, os.environ))


def _plans(args: dict) -> tuple[float, float, tuple[float, float]]:
    """(check()'s actor_train total, init's GiB as the driver logs it, the moves' two sums)."""
    from ppodeck.engine.driver.offload import awake_at_once_gib
    from ppodeck.engine.driver.roles import plan_init

    derived = check(resolve_preset(load_preset("qwen3-0.6b-ppo-1gpu")), GPU_MACHINE).derived
    message = plan_init(args, use_gpu=True, num_trainers=2, gpu_bytes=141 * GIB, env={}).message
    logged = re.search(r"([\d.]+) GiB for every role", message)
    assert logged, message
    moves = awake_at_once_gib(args, 141 * GIB, env={})
    assert moves is not None
    return derived.memory_gib["actor_train"]["total"], float(logged[1]), moves


def test_a_change_to_the_model_moves_the_estimate_and_the_driver_plans_alike(
        monkeypatch: pytest.MonkeyPatch) -> None:
    args = _args()
    before = _plans(args)
    monkeypatch.setattr(model, "CONTEXT_GIB", model.CONTEXT_GIB + 1.0)
    after = _plans(args)
    # check(): actor + critic + released rollout, each a process with a context
    assert after[0] - before[0] == pytest.approx(3.0, abs=0.02)
    # init: two trainers' contexts and the rollout's
    assert after[1] - before[1] == pytest.approx(3.0, abs=0.06)
    assert after[2][0] - before[2][0] == pytest.approx(3.0, abs=0.02)


def test_sglang_takes_its_fraction_of_the_gpu_it_runs_on_everywhere() -> None:
    from ppodeck.engine.driver.offload import awake_at_once_gib

    args = _args(rollout_backend="sglang")
    table = model.memory_estimate(args, model.count_params(args), env={}, gpu_total_gib=141.0)
    assert table["generate"]["rollout"] == pytest.approx(0.8 * 141.0, abs=0.01)
    moves = awake_at_once_gib(args, 141 * GIB, env={})
    assert moves is not None
    everything = (table["actor_train"]["actor"] + table["critic_train"]["critic"]
                  + table["generate"]["rollout"] + model.DRIVER_RESERVED_GIB)
    assert moves[1] == pytest.approx(everything, abs=0.02)


def test_a_rollout_on_its_own_gpus_never_makes_a_total_below_a_part() -> None:
    """#47: `generate: actor 4.39 critic 2.65 rollout 64 total 8.24` is gone: the total is what
    the fullest GPU of the phase holds, the rollout's own GPU included."""
    args = _args("qwen3-4b-ppo", colocate=False, rollout_num_gpus=2)
    table = model.memory_estimate(args, model.count_params(args), env={})
    for phase, row in table.items():
        parts = [row["actor"], row["critic"], row["rollout"]]
        assert all(row["total"] >= part for part in parts), (phase, row)
    peaks = model.gpu_peaks_gib(args, model.count_params(args), env={})
    assert peaks is not None and peaks["rollout"] == pytest.approx(table["generate"]["rollout"])
