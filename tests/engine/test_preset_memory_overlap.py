"""bench/preset_memory.py on an overlapped run: the whole-run NVML peak is set against the move
plan's estimate of the roles awake at once (the per-phase estimates wait on each move)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import preset_memory  # noqa: E402

H200_BYTES = 150754820096  # NVML's total on the lent H200


def _events(plan: str) -> list[dict]:
    return [{"kind": "log", "msg": f"moves: ({plan})", "move_plan": plan},
            {"kind": "gpu", "devices": [{"index": 0, "total_bytes": H200_BYTES}]}]


def test_an_overlapped_run_is_held_to_its_plans_estimate() -> None:
    figures = preset_memory.overlap_figures("qwen3-1.7b-ppo-1gpu", _events("rollout"),
                                            {"generate": 91.33, "critic_train": 81.91})
    assert figures is not None and figures["plan"] == "rollout" and figures["peak"] == 91.33
    assert 100 < figures["estimate"] < 120  # every role awake: 108.8 GiB for 1.7B


def test_the_trainers_plan_uses_the_trainers_estimate() -> None:
    rollout = preset_memory.overlap_figures("qwen3-1.7b-ppo-1gpu", _events("rollout"),
                                            {"generate": 1.0})
    trainers = preset_memory.overlap_figures("qwen3-1.7b-ppo-1gpu", _events("trainers"),
                                             {"generate": 1.0})
    assert rollout and trainers and trainers["estimate"] < rollout["estimate"]


def test_a_waited_run_has_no_overlap_line() -> None:
    assert preset_memory.overlap_figures("qwen3-1.7b-ppo-1gpu", _events("waited"),
                                         {"generate": 1.0}) is None
