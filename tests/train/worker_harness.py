"""Run trainer ranks on CPU ranks (torch.multiprocessing, gloo) and collect what they return.

On the CPU, children come from a forkserver that has torch and megatron imported already, so a
2-rank run starts in well under a second instead of re-importing megatron (~5 s) per process.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ppodeck.engine.host.ports import free_port
from ppodeck.engine.rollout.types import RolloutBatch

_PRELOAD = ["torch", "torch.distributed", "megatron.core", "megatron.core.models.gpt",
            "megatron.core.optimizer", "megatron.core.pipeline_parallel",
            "megatron.core.distributed", "ppodeck.engine.train.worker", "ppodeck.engine.algo",
            "ppodeck.engine.model.convert", "tests.train.worker_harness"]


def tiny_args(**overrides: Any) -> dict[str, Any]:  # noqa: ANN401
    """A 2-layer, hidden-64, vocab-32 Llama-like model and miles-style PPO settings, resolved
    (engine.config.resolve_values) as the driver hands them to the workers."""
    from ppodeck.engine.config.resolve import resolve_values

    args: dict[str, Any] = {
        "advantage_estimator": "ppo",
        "num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 128, "num_attention_heads": 4,
        "group_query_attention": True, "num_query_groups": 2, "vocab_size": 32,
        "max_position_embeddings": 64, "swiglu": True, "normalization": "RMSNorm",
        "disable_bias_linear": True, "position_embedding_type": "rope",
        "untie_embeddings_and_output_weights": False,
        "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
        "seed": 1234, "lr": 1e-3, "critic_lr": 1e-3, "lr_decay_style": "constant",
        "lr_warmup_iters": 0, "critic_lr_warmup_iters": 0, "weight_decay": 0.0,
        "adam_beta1": 0.9, "adam_beta2": 0.999, "clip_grad": 1.0,
        "rollout_batch_size": 8, "n_samples_per_prompt": 1, "global_batch_size": 4,
        "num_rollout": 10, "micro_batch_size": 2, "use_distributed_optimizer": True,
        "rollout_temperature": 0.8, "eps_clip": 0.2, "eps_clip_high": 0.28, "value_clip": 0.2,
        "gamma": 1.0, "lambd": 1.0, "normalize_advantages": True, "entropy_coef": 0.01,
        "use_kl_loss": True, "kl_loss_coef": 0.01, "kl_loss_type": "low_var_kl",
        "model_init": "random", "offload_train": False,
        "attention_dropout": 0.0, "hidden_dropout": 0.0,
    }
    args.update(overrides)
    return resolve_values(args, os.environ)


def tiny_batch(num_samples: int = 8, seed: int = 0, reward: float | None = None,
               vocab: int = 32) -> RolloutBatch:
    """Samples of different prompt/response lengths; some loss-mask holes."""
    gen = torch.Generator().manual_seed(seed)
    tokens, prompts, responses, masks, rewards = [], [], [], [], []
    for i in range(num_samples):
        prompt = 3 + i % 4
        response = 4 + (3 * i) % 7
        tokens.append(torch.randint(0, vocab, (prompt + response,), generator=gen).tolist())
        prompts.append(prompt)
        responses.append(response)
        mask = [1] * response
        if i % 3 == 1:
            mask[1] = 0  # a tool-output-like hole in the middle
        masks.append(mask)
        rewards.append(reward if reward is not None else float(i % 2) * 2 - 1)
    return RolloutBatch(tokens=tokens, prompt_lengths=prompts, response_lengths=responses,
                        loss_masks=masks, rewards=rewards, truncated=[False] * num_samples,
                        rollout_log_probs=None, sample_indices=list(range(num_samples)))


def run_ranks(world_size: int, body: Callable[..., dict], out_dir: Path, *args: Any,
              ports: int = 2) -> list[dict]:  # noqa: ANN401
    """Run `body(rank, world_size, ports, *args)` on every rank; return each rank's dict."""
    import torch.multiprocessing as mp

    # megatron's imports touch CUDA where there is one, and a forked child cannot use it then
    method = "spawn" if torch.cuda.is_available() else "forkserver"
    if method == "forkserver":
        multiprocessing.get_context(method).set_forkserver_preload(_PRELOAD)
    out_dir.mkdir(parents=True, exist_ok=True)
    port_list = [free_port() for _ in range(ports)]
    mp.start_processes(_child, args=(world_size, body, port_list, out_dir, args),
                       nprocs=world_size, join=True, start_method=method)
    return [torch.load(out_dir / f"rank{r}.pt", weights_only=False) for r in range(world_size)]


def _child(rank: int, world_size: int, body: Callable[..., dict], ports: list[int],
           out_dir: Path, args: tuple) -> None:
    result = body(rank, world_size, ports, *args)
    torch.save(result, out_dir / f"rank{rank}.pt")


def all_values(values: dict[int, list[float]]) -> dict[int, list[float]]:
    """Merge every rank's values dict (what the driver does with the critic's outputs)."""
    import torch.distributed as dist

    parts: list[dict[int, list[float]]] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(parts, values)
    merged: dict[int, list[float]] = {}
    for part in parts:
        merged.update(part)
    return merged
