"""Preflight: every config-reading constructor of the engine's start-up, before Ray starts.

The driver runs it first, so a configuration the engine cannot take fails in a second with the
reason, not after Ray and the placement group are up; only Megatron's TransformerConfig checks
(preflight_model: megatron-core's import takes 4-10 s) run alongside Ray's start, and the
driver waits for them before any model is built. It builds nothing heavy: the train
settings of each trainer, the model shape and Megatron's TransformerConfig (whose own checks
run), the placement layout, the prompt options, the reward function and the rollout backend.
Tests run it on every config check() passes ("what validates is what runs").
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


def trainer_roles(args: Mapping[str, Any]) -> list[str]:
    """The train groups the driver builds: none for rollout-only debugging, no critic for GRPO."""
    if args["debug_rollout_only"]:
        return []
    return ["critic", "actor"] if args["use_critic"] else ["actor"]


def preflight(args: Mapping[str, Any], cuda: bool | None = None) -> list[str]:
    """Raise (ValueError, AssertionError, ...) where start-up would; return what it checked."""
    return preflight_host(args, cuda) + preflight_model(args, cuda)


def preflight_host(args: Mapping[str, Any], cuda: bool | None = None) -> list[str]:
    """Everything but Megatron's TransformerConfig: no megatron-core import, so it takes
    milliseconds once torch is loaded. The driver runs it before Ray starts."""
    from ..launch.resume_check import check_or_raise
    from ..model.shape import ModelShape
    from ..rollout.data import PromptOptions
    from ..rollout.manager import RolloutManager
    from ..rollout.user_rewards import check_reward_setup
    from ..train.platform import has_cuda
    from ..train.settings import TrainSettings
    from . import cluster

    cuda = has_cuda() if cuda is None else cuda
    check_or_raise(args)  # the checkpoints it will load, each problem with its directory + fix
    checked = [f"placement: {cluster.bundle_layout(dict(args))[0]} bundles"]
    ModelShape.from_args(args)
    for role in trainer_roles(args):
        TrainSettings.from_args(role, args, args["world_size"], cuda)
        checked.append(f"{role}: train settings")
    RolloutManager(dict(args))._check_required()
    PromptOptions.from_args(args)
    check_reward_setup(args)  # the rm type, and the user functions imported (not called)
    checked.append("rollout: batch, prompt options, reward")
    checked.append("checkpoints: trackers, iterations, optimizer state, value head")
    return checked


def preflight_model(args: Mapping[str, Any], cuda: bool | None = None) -> list[str]:
    """Megatron's TransformerConfig of each trainer, whose own checks run. Importing
    megatron-core takes 4-10 s, so the driver runs this alongside Ray's start
    (preflight_in_background) and waits for it before the models are built."""
    from ..model.shape import ModelShape
    from ..train.model import transformer_config
    from ..train.platform import Parallelism, has_cuda
    from ..train.settings import TrainSettings

    cuda = has_cuda() if cuda is None else cuda
    shape = ModelShape.from_args(args)
    checked = []
    for role in trainer_roles(args):
        settings = TrainSettings.from_args(role, args, args["world_size"], cuda)
        transformer_config(shape, Parallelism(settings.tp, settings.pp, settings.cp),
                           bf16=settings.bf16)
        checked.append(f"{role}: TransformerConfig")
    return checked


def preflight_in_background(args: Mapping[str, Any]) -> Future[list[str]]:
    """preflight_model in a thread: its import (Python, holding the GIL) overlaps Ray's start,
    which mostly waits for Ray's processes. `.result()` re-raises what it raised."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="preflight")
    future = pool.submit(preflight_model, dict(args))
    pool.shutdown(wait=False)  # the thread ends with its one task
    return future
