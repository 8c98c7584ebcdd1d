"""engine.* rules: the config against the engine that will run it and the machine it runs on."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ppodeck.engine.config import check
from ppodeck.engine.config import rules_engine as rules_engine_module
from ppodeck.engine.config import rules_memory as rules_memory_module
from ppodeck.engine.config.machine import Machine
from ppodeck.engine.config.rules_engine import RM_TYPES
from ppodeck.engine.config.schema import BY_DEST, FLAGS
from ppodeck.engine.host.memory import GpuMemory, Holder, Holdings

from .conftest import CPU_MACHINE, GPU_MACHINE
from .test_rules import config

NO_SGLANG_GPU = Machine(gpus=1, transformer_engine=False, sglang=False, env=os.environ)


def _held(free_gib: float) -> Holdings:
    """One 80 GiB GPU with `free_gib` free, the rest held by pid 7."""
    return Holdings((GpuMemory(0, "GPU-0", 80.0, free_gib, (Holder(7, 80.0 - free_gib),)),),
                    512.0, 400.0)

# a Qwen2 config.json of the test config's shape (q/k/v biases, RoPE base 10000)
TINY_QWEN2 = str(Path(__file__).parents[1] / "fixtures" / "hf_tiny_qwen2")

# (code, machine, changes that trip it, changes that pass it)
CASES: list[tuple[str, Machine, dict[str, Any], dict[str, Any]]] = [
    ("engine.refused", CPU_MACHINE, {"use_opsm": True}, {"use_opsm": False}),
    ("engine.command_only", CPU_MACHINE, {"balance_data": True}, {"balance_data": False}),
    ("engine.estimator", CPU_MACHINE, {"advantage_estimator": "gspo"},
     {"advantage_estimator": "ppo"}),
    ("engine.context_parallel", GPU_MACHINE,
     {"context_parallel_size": 2, "actor_num_gpus_per_node": 2},
     {"context_parallel_size": 1, "actor_num_gpus_per_node": 2}),
    ("engine.sequence_parallel_without_tp", GPU_MACHINE,
     {"sequence_parallel": True, "actor_num_gpus_per_node": 2},
     {"sequence_parallel": True, "tensor_model_parallel_size": 2,
      "actor_num_gpus_per_node": 2}),
    ("engine.allgather_cp_without_cp", GPU_MACHINE,
     {"allgather_cp": True, "actor_num_gpus_per_node": 2},
     {"allgather_cp": True, "context_parallel_size": 2, "actor_num_gpus_per_node": 2}),
    ("engine.lr_wsd", CPU_MACHINE, {"lr_decay_style": "WSD"}, {"lr_decay_style": "cosine"}),
    ("engine.lr_decay_unknown_length", CPU_MACHINE,
     {"lr_decay_style": "cosine", "num_rollout": None, "num_epoch": 1},
     {"lr_decay_style": "cosine", "num_rollout": 10}),
    ("engine.position_embedding", CPU_MACHINE,
     {"use_rotary_position_embeddings": False, "position_embedding_type": "mrope"},
     {"use_rotary_position_embeddings": False, "position_embedding_type": "learned_absolute"}),
    ("engine.rope_scaling_without_rope", CPU_MACHINE,
     {"use_rope_scaling": True, "use_rotary_position_embeddings": False,
      "position_embedding_type": "learned_absolute"}, {"use_rope_scaling": True}),
    ("engine.rope_scaling_factor", CPU_MACHINE,
     {"use_rope_scaling": True, "rotary_scaling_factor": 0.5},
     {"use_rope_scaling": True, "rotary_scaling_factor": 32.0}),
    ("engine.rope_scaling_factor_unused", CPU_MACHINE, {"rotary_scaling_factor": 32.0},
     {"rotary_scaling_factor": 32.0, "use_rope_scaling": True}),
    ("engine.qkv_bias_with_qk_norm", CPU_MACHINE, {"add_qkv_bias": True, "qk_layernorm": True},
     {"add_qkv_bias": True}),
    ("engine.hf_config_mismatch", CPU_MACHINE,
     {"model_init": None, "hf_checkpoint": TINY_QWEN2},
     {"model_init": None, "hf_checkpoint": TINY_QWEN2, "add_qkv_bias": True,
      "norm_epsilon": 1e-6}),  # the fixture's rms_norm_eps
    ("engine.fast_decoder_no_bias", NO_SGLANG_GPU,
     {"add_qkv_bias": True, "rollout_backend": "hf"}, {"rollout_backend": "hf"}),
    ("engine.rm_type", CPU_MACHINE, {"rm_type": "dapo"}, {"rm_type": "boxed_math"}),
    ("engine.sglang_missing", NO_SGLANG_GPU, {"rollout_backend": "sglang"},
     {"rollout_backend": "hf"}),
    ("engine.sglang_needs_cuda", CPU_MACHINE, {"rollout_backend": "sglang"},
     {"rollout_backend": "hf"}),
    ("engine.seq_length_unbounded", CPU_MACHINE,
     {"seq_length": 64, "rollout_max_prompt_len": 50, "rollout_max_response_len": 100},
     {"seq_length": 64, "rollout_max_context_len": 64, "rollout_max_prompt_len": 50}),
    ("engine.hf_one_gpu", NO_SGLANG_GPU,
     {"rollout_backend": "hf", "colocate": False, "rollout_num_gpus": 2,
      "actor_num_gpus_per_node": 1},
     {"rollout_backend": "hf", "colocate": False, "rollout_num_gpus": 1,
      "actor_num_gpus_per_node": 1}),
    ("engine.hf_one_gpu_colocated", GPU_MACHINE,
     {"rollout_backend": "hf", "colocate": True, "actor_num_gpus_per_node": 2},
     {"rollout_backend": "hf", "colocate": True, "actor_num_gpus_per_node": 1}),
    ("engine.bridge_missing", CPU_MACHINE, {"megatron_to_hf_mode": "bridge"},
     {"megatron_to_hf_mode": "raw"}),
    ("engine.backend_auto", CPU_MACHINE, {"rollout_backend": "auto"}, {"rollout_backend": "hf"}),
    ("engine.gpus_missing", NO_SGLANG_GPU, {"actor_num_gpus_per_node": 2},
     {"actor_num_gpus_per_node": 1}),
    ("engine.cpu_ranks", CPU_MACHINE, {"actor_num_gpus_per_node": 2},
     {"actor_num_gpus_per_node": 1}),
    ("engine.bf16_needs_cuda", CPU_MACHINE, {"bf16": True}, {}),
    ("engine.cluster_checked_at_launch", CPU_MACHINE, {"ray_address": "10.0.0.1:6379"}, {}),
    ("engine.host_memory", Machine(1, False, False, host_memory_bytes=1 << 20, env=os.environ),
     {"offload_train": True, "actor_num_gpus_per_node": 1},
     {"offload_train": False, "actor_num_gpus_per_node": 1}),
    # a tiny state fits 16 GiB pinned, not beside three workers' processes (25.5 GiB)
    ("engine.host_memory_tight",
     Machine(1, False, False, host_memory_bytes=16 << 30, env=os.environ),
     {"offload_train": True, "actor_num_gpus_per_node": 1},
     {"offload_train": False, "actor_num_gpus_per_node": 1}),
    # what the machine holds now (engine/config/rules_memory.py; tests/host has the rest)
    ("engine.host_memory_cpu", replace(CPU_MACHINE, holdings=Holdings(None, 24.0, 0.2)), {},
     {"ray_address": "10.0.0.1:6379"}),
    ("engine.gpu_memory", replace(NO_SGLANG_GPU, holdings=_held(0.1)), {},
     {"ray_address": "10.0.0.1:6379"}),
    ("engine.gpu_memory_shared", replace(NO_SGLANG_GPU, holdings=_held(70.0)), {},
     {"ray_address": "10.0.0.1:6379"}),
    ("engine.gpu_memory_unread", replace(NO_SGLANG_GPU, holdings=Holdings(
        None, 512.0, 400.0, "NVML did not answer")), {}, {"ray_address": "10.0.0.1:6379"}),
]


@pytest.mark.parametrize(("code", "machine", "trip", "ok"), CASES, ids=[c[0] for c in CASES])
def test_engine_rule_trips_and_passes(code: str, machine: Machine, trip: dict[str, Any],
                                      ok: dict[str, Any]) -> None:
    assert code in check(config(**trip), machine).codes()
    assert code not in check(config(**ok), machine).codes()


def test_every_engine_rule_code_has_a_case() -> None:
    source = (Path(rules_engine_module.__file__).read_text()
              + Path(rules_memory_module.__file__).read_text())
    found = set(re.findall(r'"(?:error|warning|info)",\s*"(engine\.[a-z0-9_]+)"', source))
    found |= set(re.findall(r'Issue\("(?:error|warning|info)", "(engine\.[a-z0-9_]+)"', source))
    found.add("engine.passthrough_ignored")  # tests/config/test_rules.py
    assert found <= {c[0] for c in CASES} | {"engine.passthrough_ignored"}, found


@pytest.mark.parametrize("flag", [f for f in FLAGS if f.engine.cls == "refused"],
                         ids=lambda f: f.name)
def test_every_refused_flag_is_an_error_when_set(flag: Any) -> None:  # noqa: ANN401
    value = _non_default(flag)
    report = check(config(**{flag.dest: value}), CPU_MACHINE)
    refused = [i for i in report.errors if i.code == "engine.refused"]
    assert [i.flags for i in refused] == [(flag.name,)], report.issues
    assert flag.engine.reason in refused[0].message


def _non_default(flag: Any) -> Any:  # noqa: ANN401
    if flag.kind in ("bool", "tristate"):
        return not flag.default
    if flag.kind == "choice":
        return next(c for c in flag.choices if c != flag.default)
    if flag.kind == "list":
        return ("a", "b")
    if flag.kind == "int":
        return (flag.default or 0) + 2
    if flag.kind == "float":
        return (flag.default or 0.0) + 0.5
    return "/tmp/x"


def test_command_only_flags_are_one_warning_naming_each() -> None:
    report = check(config(balance_data=True, tool_key="t", qkv_format="bshd",
                          use_dynamic_batch_size=False), CPU_MACHINE)
    warning = next(i for i in report.warnings if i.code == "engine.command_only")
    assert set(warning.flags) == {"--balance-data", "--tool-key", "--qkv-format"}
    assert BY_DEST["tool_key"].engine.reason in warning.message


def test_context_parallel_runs_and_says_how_it_splits() -> None:
    """CP is no longer refused: an info says how rows are cut and what the token budget
    counts; TP x PP x CP must still divide the world (miles' rule, kept)."""
    values = {"context_parallel_size": 2, "actor_num_gpus_per_node": 4,
              "pipeline_model_parallel_size": 2, "use_dynamic_batch_size": True,
              "max_tokens_per_gpu": 1024}
    report = check(config(**values), GPU_MACHINE)
    assert report.ok, report.errors
    info = next(i for i in report.infos if i.code == "engine.context_parallel")
    assert "multiple of 4 tokens" in info.message and "chunks r and 3-r" in info.message
    assert "--max-tokens-per-gpu 1024 counts the tokens one CP rank holds" in info.message
    odd = check(config(**{**values, "actor_num_gpus_per_node": 6}), GPU_MACHINE)
    assert "parallel.world_size_not_divisible" in odd.codes("error")


def test_gpus_missing_names_both_numbers() -> None:
    report = check(config(actor_num_gpus_per_node=2, colocate=False, rollout_num_gpus=2),
                   NO_SGLANG_GPU)
    issue = next(i for i in report.errors if i.code == "engine.gpus_missing")
    assert "needs 4 GPUs (actor 2 + rollout 2)" in issue.message
    assert "has 1 visible" in issue.message


def test_engine_errors_are_not_config_errors() -> None:
    report = check(config(use_opsm=True, kl_coef=0.1), CPU_MACHINE)
    assert {i.code for i in report.errors} >= {"engine.refused", "ppo.kl_coef_nonzero"}
    assert {i.code for i in report.config_errors} == {"ppo.kl_coef_nonzero"}


def test_rm_types_match_the_rollout_rewards() -> None:
    from ppodeck.engine.rollout.rewards import REWARDS

    assert set(RM_TYPES) == set(REWARDS)


def test_the_live_machine_probe_imports_nothing_heavy() -> None:
    import subprocess
    import sys

    code = ("import sys; from ppodeck.engine.config.rules_engine import this_machine;"
            " m = this_machine();"
            " heavy = {'torch', 'ray', 'sglang', 'transformer_engine'} & set(sys.modules);"
            " print(m.gpus >= 0, sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "True []"


@pytest.mark.parametrize("values", [{"norm_epsilon": 1e-5},
                                    {"untie_embeddings_and_output_weights": True}])
def test_hf_config_mismatch_covers_norm_epsilon_and_tying(values: dict[str, Any]) -> None:
    """The fixture writes rms_norm_eps 1e-6 and tied embeddings: a trainer built otherwise
    computes a different model than the rollout loads (miles refuses these too)."""
    matching = {"model_init": None, "hf_checkpoint": TINY_QWEN2, "add_qkv_bias": True,
                "norm_epsilon": 1e-6, "untie_embeddings_and_output_weights": False}
    assert "engine.hf_config_mismatch" not in check(config(**matching), CPU_MACHINE).codes()
    assert "engine.hf_config_mismatch" in check(config(**{**matching, **values}),
                                                CPU_MACHINE).codes()
