"""Derived values shown next to the issues: topology, batch arithmetic and the memory estimate
(engine/config/memory.py computes it: per GPU on a GPU machine, in host memory on CPU)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .memory import PHASES, ROLES, count_params, cpu_host_gib, memory_estimate
from .model import RunConfig
from .resolve import resolve

__all__ = ["PHASES", "ROLES", "Derived", "derive", "derive_resolved"]


@dataclass(frozen=True)
class Derived:
    """Numbers derived from a config; None where the inputs do not determine them."""

    world_size: int | None = None
    dp_size: int | None = None
    rollout_num_gpus: int | None = None
    rollout_engines: int | None = None
    samples_per_rollout: int | None = None
    samples_trimmed: int | None = None
    actor_steps_per_rollout: int | None = None
    critic_steps_per_rollout: int | None = None
    total_train_iters: int | None = None
    gpus_needed: int | None = None
    params: int | None = None
    memory_gib: Mapping[str, Mapping[str, float | None]] = field(default_factory=dict)
    # a run on CPU: what its ranks hold in host memory (memory.cpu_host_gib), else None
    host_memory_gib: Mapping[str, float] | None = None
    # the GPUs the run takes, as read now (rules_memory judges them): (index, free, total) GiB
    gpu_free_gib: tuple[tuple[int, float, float], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["memory_gib"] = {phase: dict(roles) for phase, roles in self.memory_gib.items()}
        if self.host_memory_gib is not None:
            out["host_memory_gib"] = dict(self.host_memory_gib)
        return out


# What each figure is computed from: check() blanks a figure when one of its inputs has an error
# of its own (a value that cannot run), so the derived block never shows a number made from it.
_LAYOUT = ("actor_num_nodes", "actor_num_gpus_per_node", "tensor_model_parallel_size",
           "pipeline_model_parallel_size", "context_parallel_size")
_ROLLOUT_GPUS = ("rollout_num_gpus", "rollout_num_gpus_per_engine", "colocate")
_SAMPLES = ("rollout_batch_size", "n_samples_per_prompt")
_STEPS = (*_SAMPLES, "global_batch_size", "num_steps_per_rollout")
_SHAPE = ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
          "ffn_hidden_size", "vocab_size", "num_experts", "moe_ffn_hidden_size",
          "make_vocab_size_divisible_by")
_MEMORY = (*_SHAPE, *_LAYOUT, *_ROLLOUT_GPUS, *_SAMPLES, "micro_batch_size",
           "max_tokens_per_gpu", "seq_length", "max_prompt_len", "rollout_max_response_len",
           "rollout_max_context_len", "sglang_mem_fraction_static")
INPUTS: dict[str, tuple[str, ...]] = {
    "world_size": _LAYOUT[:2], "dp_size": _LAYOUT, "gpus_needed": (*_LAYOUT, *_ROLLOUT_GPUS),
    "rollout_num_gpus": (*_LAYOUT[:2], *_ROLLOUT_GPUS), "rollout_engines": _ROLLOUT_GPUS,
    "samples_per_rollout": _SAMPLES, "samples_trimmed": _STEPS,
    "actor_steps_per_rollout": _STEPS, "critic_steps_per_rollout": _STEPS,
    "total_train_iters": (*_STEPS, "num_rollout", "num_epoch"), "params": _SHAPE,
    "memory_gib": _MEMORY, "host_memory_gib": _MEMORY,
}
_BLANK: dict[str, Any] = {"memory_gib": {}, "host_memory_gib": None}


def without_figures_from(derived: Derived, bad: set[str]) -> Derived:
    """`derived` with every figure whose inputs include a dest in `bad` blanked."""
    blanked: dict[str, Any] = {name: _BLANK.get(name) for name, inputs in INPUTS.items()
                               if bad.intersection(inputs)}
    return dataclasses.replace(derived, **blanked) if blanked else derived


def derive(config: RunConfig, env: Mapping[str, str]) -> Derived:
    """Derived values of `config` resolved in `env`, the environment the run starts in."""
    return derive_resolved(resolve(config, env), env)


def _positive(*values: Any) -> bool:  # noqa: ANN401
    return all(type(v) is int and v > 0 for v in values)


def derive_resolved(r: Mapping[str, Any], env: Mapping[str, str], on_cpu: bool = False,
                    gpu_total_gib: float | None = None) -> Derived:
    """Derived values from a resolve()d dict (check() reuses its own resolution); `env`: the
    run's environment (the memory estimate's decoder variant). `on_cpu`:
    the run's ranks are CPU processes (no GPU visible), so no GPU count and memory in host
    RAM; `gpu_total_gib`: the GPU's size where known (SGLang's share is a fraction of it)."""
    world = r["world_size"]
    rbs, n, gbs = r["rollout_batch_size"], r["n_samples_per_prompt"], r["global_batch_size"]
    samples = rbs * n if _positive(rbs, n) else None
    steps = samples // gbs if samples is not None and _positive(gbs) else None
    trimmed = samples % gbs if steps is not None else None
    total_iters = r["train_iters"] if steps is not None else None
    params = count_params(r)
    return Derived(
        world_size=world,
        dp_size=r["dp_size"],
        rollout_num_gpus=None if on_cpu else r["rollout_num_gpus"],
        rollout_engines=r["rollout_engines"],
        samples_per_rollout=samples,
        samples_trimmed=trimmed,
        actor_steps_per_rollout=steps,
        critic_steps_per_rollout=(steps if r["use_critic"] else 0) if steps is not None else None,
        total_train_iters=total_iters,
        gpus_needed=None if on_cpu else gpus_needed(r),
        params=params,
        memory_gib={} if on_cpu else memory_estimate(r, params, env, gpu_total_gib=gpu_total_gib),
        host_memory_gib=cpu_host_gib(r, params) if on_cpu else None,
    )


def gpus_needed(r: Mapping[str, Any]) -> int | None:
    """Placement-group bundles of one GPU each (resolve(): miles' layout)."""
    return r["placement_bundles"]


