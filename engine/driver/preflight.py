"""Preflight: every config-reading constructor of the engine's start-up, before Ray starts.

The driver runs it first, so a configuration the engine cannot take fails in a second with the
reason, not after Ray and the placement group are up. It builds nothing heavy: the train
settings of each trainer, the model shape and Megatron's TransformerConfig (whose own checks
run), the placement layout, the prompt options, the reward function and the rollout backend.
Tests run it on every config check() passes ("what validates is what runs").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def trainer_roles(args: Mapping[str, Any]) -> list[str]:
    """The train groups the driver builds: none for rollout-only debugging, no critic for GRPO."""
    if args["debug_rollout_only"]:
        return []
    return ["critic", "actor"] if args["use_critic"] else ["actor"]


def preflight(args: Mapping[str, Any], cuda: bool | None = None) -> list[str]:
    """Raise (ValueError, AssertionError, ...) where start-up would; return what it checked."""
    from engine.driver import cluster
    from engine.resume_check import check_or_raise
    from engine.rollout.data import PromptOptions
    from engine.rollout.manager import RolloutManager
    from engine.rollout.rewards import get_reward_fn
    from engine.train.model import ModelShape, transformer_config
    from engine.train.platform import Parallelism, has_cuda
    from engine.train.settings import TrainSettings

    cuda = has_cuda() if cuda is None else cuda
    check_or_raise(args)  # the checkpoints it will load, each problem with its directory + fix
    checked = [f"placement: {cluster.bundle_layout(dict(args))[0]} bundles"]
    shape = ModelShape.from_args(args)
    for role in trainer_roles(args):
        settings = TrainSettings.from_args(role, args, args["world_size"], cuda)
        transformer_config(shape, Parallelism(settings.tp, settings.pp, settings.cp),
                           bf16=settings.bf16)
        checked.append(f"{role}: train settings and TransformerConfig")
    RolloutManager(dict(args))._check_required()
    PromptOptions.from_args(args)
    if args["rm_type"]:
        get_reward_fn(args["rm_type"])
    checked.append("rollout: batch, prompt options, reward")
    checked.append("checkpoints: trackers, iterations, optimizer state, value head")
    return checked
