"""The canary's recipes (engine/launch/canary.py): the GPU recipe is a config a one-GPU machine
accepts, on the copy-digit task's own vocabulary, and every versioned corridor was kept from the
recipe the code runs now."""

from __future__ import annotations

import json
import os

import pytest

from ppodeck.engine.config import check
from ppodeck.engine.config.machine import Machine
from ppodeck.engine.launch.canary import (
    CPU_RECIPE,
    GPU_RECIPE,
    RECIPE_OVERRIDES,
    recipe,
    recipe_overrides,
)
from ppodeck.engine.presets import load_preset, resolve_preset
from ppodeck.engine.rollout.synthetic import MAX_VOCAB
from ppodeck.engine.run.corridor import CORRIDOR_DIR, read_corridor


def test_the_cpu_recipe_sets_only_the_common_overrides() -> None:
    assert recipe_overrides(CPU_RECIPE) == RECIPE_OVERRIDES


def test_the_gpu_recipe_is_accepted_on_one_gpu_and_samples_the_task_vocabulary() -> None:
    overrides = recipe_overrides(GPU_RECIPE)
    assert overrides["num_rollout"] >= RECIPE_OVERRIDES["num_rollout"]
    config = resolve_preset(load_preset(GPU_RECIPE)).with_values(**overrides)
    machine = Machine(gpus=1, transformer_engine=False, sglang=False, env=os.environ)
    report = check(config, machine)
    assert [f"{i.code}: {i.message}" for i in report.errors] == []
    values = config.values
    assert values["vocab_size"] == MAX_VOCAB  # every token the model draws is a task word
    assert values.get("rollout_backend", "hf") == "hf"


@pytest.mark.parametrize("path", sorted(CORRIDOR_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_each_versioned_corridor_was_kept_from_the_current_recipe(path) -> None:
    kept = read_corridor(path)
    assert kept["recipe"] == json.loads(json.dumps(recipe(path.stem)))
    assert kept["trusted_runs"] >= 2
