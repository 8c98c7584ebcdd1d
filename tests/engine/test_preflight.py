"""What validates is what runs: every config check() passes gets through the engine's start-up
constructors (engine/driver/preflight.py, which the driver runs before Ray), and what they refuse
check() refuses first. The cases are the rule tests' passing configs and the built-in presets."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest

from ppodeck.engine.config import RunConfig, check, resolve
from ppodeck.engine.config.machine import Machine
from ppodeck.engine.driver.preflight import preflight
from ppodeck.engine.presets import BUILTIN_DIR, load_preset, resolve_preset
from tests.config import test_rules, test_rules_engine
from tests.conftest import CPU_MACHINE

PASSING = ([(f"rules:{code}", test_rules.config(**ok)) for code, _, ok in test_rules.CASES]
           + [(f"engine:{code}", test_rules.config(**ok))
              for code, machine, _, ok in test_rules_engine.CASES if machine == CPU_MACHINE])
PRESETS = sorted(p.stem for p in BUILTIN_DIR.glob("*.toml"))


# a CPU host with the RAM the 4B presets' CPU ranks need, so that their layouts (TP1 x PP2 x CP2)
# still reach the start-up constructors; CPU_MACHINE's 24 GiB refuses them (engine.host_memory_cpu)
BIG_CPU_HOST = dataclasses.replace(CPU_MACHINE, host_memory_bytes=1 << 40)


def _starts_or_is_refused(config: RunConfig, machine: Machine = CPU_MACHINE) -> str:
    report = check(config, machine)
    if not report.ok:
        return "refused: " + ", ".join(sorted({i.code for i in report.errors}))
    preflight(resolve(config, os.environ), cuda=False)
    return "starts"


@pytest.mark.parametrize(("name", "config"), PASSING, ids=[c[0] for c in PASSING])
def test_every_passing_rule_case_starts_or_is_refused(name: str, config: RunConfig) -> None:
    assert _starts_or_is_refused(config)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_builtin_preset_starts_or_is_refused(preset: str) -> None:
    config = resolve_preset(load_preset(preset))
    outcome = _starts_or_is_refused(config, BIG_CPU_HOST)
    expected: dict[str, Any] = {
        "tiny-cpu": "starts", "smollm2-135m-cpu": "starts",
        "qwen3-0.6b-ppo-1gpu": "refused: engine.bf16_needs_cuda",
        "qwen3-4b-ppo": "starts", "qwen3-4b-ppo-ci": "starts",  # TP1 x PP2 x CP2
    }
    assert outcome == expected.get(preset, outcome)
    if preset.startswith("qwen3-4b"):  # on a 24 GiB CPU host their ranks do not fit
        assert _starts_or_is_refused(config) == "refused: engine.host_memory_cpu"


def test_preflight_fails_where_start_up_would() -> None:
    """The seam is real: a shape Megatron rejects fails here, before any Ray process."""
    args = resolve(test_rules.config(num_attention_heads=4, tensor_model_parallel_size=3,
                                     actor_num_gpus_per_node=3), os.environ)
    with pytest.raises((ValueError, AssertionError)):
        preflight(args, cuda=False)
