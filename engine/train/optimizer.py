"""Megatron DDP, optimizer (Adam) and LR scheduler for one role, set up like Megatron-LM/miles."""

from __future__ import annotations

import torch

from .settings import TrainSettings


def wrap_ddp(model: torch.nn.Module, config, settings: TrainSettings):  # noqa: ANN001, ANN201
    """Megatron's DistributedDataParallel: contiguous grad buffers (fp32 with
    --accumulate-allreduce-grads-in-fp32, else the param dtype), sync at step end."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=settings.grad_reduce_in_fp32,
        overlap_grad_reduce=False,
        use_distributed_optimizer=settings.use_distributed_optimizer,
    )
    return DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)


def build_optimizer(ddp, settings: TrainSettings):  # noqa: ANN001, ANN201
    """get_megatron_optimizer(Adam): fp32 master weights when the params are bf16."""
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    config = OptimizerConfig(
        optimizer="adam",
        lr=settings.lr,
        min_lr=settings.min_lr,
        weight_decay=settings.weight_decay,
        adam_beta1=settings.adam_beta1,
        adam_beta2=settings.adam_beta2,
        adam_eps=settings.adam_eps,
        clip_grad=settings.clip_grad,
        bf16=settings.bf16,
        params_dtype=torch.bfloat16 if settings.bf16 else torch.float32,
        use_distributed_optimizer=settings.use_distributed_optimizer,
    )
    from .fastpaths import fuse_adam, install_grad_kernels

    install_grad_kernels()
    optimizer = get_megatron_optimizer(config, [ddp])
    fuse_adam(optimizer)
    return optimizer


def build_scheduler(optimizer, settings: TrainSettings):  # noqa: ANN001, ANN201
    """OptimizerParamScheduler counted in samples, as Megatron-LM does with --train-iters:
    every optimizer step advances it by the global batch size."""
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    gbs = settings.global_batch_size
    decay_steps = (settings.lr_decay_iters or settings.train_iters) * gbs
    if settings.lr_warmup_fraction is not None:
        warmup_steps = int(settings.lr_warmup_fraction * decay_steps)
    else:
        warmup_steps = settings.lr_warmup_iters * gbs
    decay_steps = max(decay_steps, warmup_steps + 1)  # megatron asserts warmup < decay
    return OptimizerParamScheduler(
        optimizer,
        init_lr=0.0,
        max_lr=settings.lr,
        min_lr=settings.min_lr,
        lr_warmup_steps=warmup_steps,
        lr_decay_steps=decay_steps,
        lr_decay_style=settings.lr_decay_style,
        start_wd=settings.weight_decay,
        end_wd=settings.weight_decay,
        wd_incr_steps=settings.train_iters * gbs,
        wd_incr_style="constant",
    )


def hook_schedule(config, ddp, optimizer) -> None:  # noqa: ANN001
    """What Megatron-LM's train loop sets on the model config for get_forward_backward_func:
    grad sync only after the last micro-batch, then finalize_model_grads (DP reduce, and the
    tied-embedding all-reduce between the first and last PP stage), optimizer loss scaling."""
    from megatron.core.distributed import finalize_model_grads

    config.no_sync_func = ddp.no_sync
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = optimizer.scale_loss
