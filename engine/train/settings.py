"""The train worker's hyper-parameters, read once from the resolved args (miles' flag names).

The args are `engine.config.resolve()`'s output: every dest is present and miles' fallbacks
(critic lr, eps_clip_high, the global batch from --num-steps-per-rollout, train_iters...) are
already applied there, so nothing here defaults or derives a value again. Callers with a partial
dict (tests, scripts) resolve it first (`engine.config.resolve_values`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Role = Literal["actor", "critic"]


@dataclass(frozen=True)
class TrainSettings:
    role: Role
    # parallelism and precision
    tp: int
    pp: int
    cp: int
    seed: int
    bf16: bool
    use_distributed_optimizer: bool
    grad_reduce_in_fp32: bool  # --accumulate-allreduce-grads-in-fp32
    # batches
    global_batch_size: int
    micro_batch_size: int
    use_dynamic_batch_size: bool
    max_tokens_per_gpu: int | None
    log_probs_max_tokens_per_gpu: int | None
    log_probs_chunk_size: int
    train_iters: int
    calculate_per_token_loss: bool
    # optimizer and schedule (the critic's lr/warmup already swapped in, as miles does)
    lr: float
    min_lr: float
    lr_decay_style: str
    lr_warmup_iters: int
    lr_warmup_fraction: float | None
    lr_decay_iters: int | None
    weight_decay: float
    adam_beta1: float
    adam_beta2: float
    adam_eps: float
    clip_grad: float
    # PPO
    advantage_estimator: str
    use_critic: bool
    gamma: float
    lambd: float
    rollout_temperature: float
    value_clip: float
    eps_clip: float
    eps_clip_high: float
    eps_clip_c: float | None
    normalize_advantages: bool
    entropy_coef: float
    observe_training_entropy: bool
    use_kl_loss: bool
    kl_loss_coef: float
    kl_loss_type: str
    use_unbiased_kl: bool
    ref_update_interval: int | None
    # off-policy correction against the rollout's log-probs
    use_rollout_logprobs: bool
    use_tis: bool
    tis_clip: float
    tis_clip_low: float
    # lifecycle (whether a trainer sleeps is the driver's decision: engine/driver/offload.py)
    model_init: str | None
    hf_checkpoint: str | None
    load: str | None
    # --sequence-parallel (TP > 1) and --allgather-cp (transformer-engine's CP communication;
    # the engine's own CP attention always all-gathers keys and values)
    sequence_parallel: bool = False
    allgather_cp: bool = False

    @property
    def needs_entropy(self) -> bool:
        return self.entropy_coef != 0.0 or self.observe_training_entropy

    @classmethod
    def from_args(cls, role: Role, args: Mapping[str, Any], world_size: int,
                  cuda: bool) -> TrainSettings:
        """`args`: resolved (engine.config.resolve). `cuda`: bf16 params with fp32 master
        weights on GPUs (miles: bf16 = not fp16); float32 on the CPU, where bf16 matmuls are
        slow and the shim is tested."""
        tp = args["tensor_model_parallel_size"]
        pp = args["pipeline_model_parallel_size"]
        cp = args["context_parallel_size"]
        # check() refuses this before launch (engine.* rules); reaching here is a bug upstream
        assert args["lr_decay_style"] != "WSD", "check() refuses --lr-decay-style WSD"
        if world_size % (tp * pp * cp):
            raise ValueError(f"world size {world_size} is not a multiple of "
                             f"TP*PP*CP={tp * pp * cp}")
        is_critic = role == "critic"
        return cls(
            role=role,
            tp=tp,
            pp=pp,
            cp=cp,
            seed=int(args["seed"]),
            bf16=bool(cuda and args["bf16"]),
            use_distributed_optimizer=bool(args["use_distributed_optimizer"]),
            grad_reduce_in_fp32=bool(args["accumulate_allreduce_grads_in_fp32"]),
            global_batch_size=int(args["global_batch_size"]),
            micro_batch_size=int(args["micro_batch_size"]),
            use_dynamic_batch_size=bool(args["use_dynamic_batch_size"]),
            max_tokens_per_gpu=args["max_tokens_per_gpu"],
            log_probs_max_tokens_per_gpu=args["log_probs_max_tokens_per_gpu"],
            log_probs_chunk_size=int(args["log_probs_chunk_size"]),
            train_iters=_train_iters(args),
            calculate_per_token_loss=bool(args["calculate_per_token_loss"]),
            lr=float(args["critic_lr"] if is_critic else args["lr"]),
            min_lr=float(args["min_lr"]),
            lr_decay_style=str(args["lr_decay_style"]),
            lr_warmup_iters=int(args["critic_lr_warmup_iters" if is_critic
                                     else "lr_warmup_iters"]),
            lr_warmup_fraction=args["lr_warmup_fraction"],
            lr_decay_iters=args["lr_decay_iters"],
            weight_decay=float(args["weight_decay"]),
            adam_beta1=float(args["adam_beta1"]),
            adam_beta2=float(args["adam_beta2"]),
            adam_eps=float(args["adam_eps"]),
            clip_grad=float(args["clip_grad"]),
            advantage_estimator=str(args["advantage_estimator"]),
            use_critic=bool(args["use_critic"]),
            gamma=float(args["gamma"]),
            lambd=float(args["lambd"]),
            rollout_temperature=float(args["rollout_temperature"]),
            value_clip=float(args["value_clip"]),
            eps_clip=float(args["eps_clip"]),
            eps_clip_high=float(args["eps_clip_high"]),
            eps_clip_c=args["eps_clip_c"],
            normalize_advantages=bool(args["normalize_advantages"]),
            entropy_coef=float(args["entropy_coef"]),
            observe_training_entropy=bool(args["observe_training_entropy"]),
            use_kl_loss=bool(args["use_kl_loss"]),
            kl_loss_coef=float(args["kl_loss_coef"]),
            kl_loss_type=str(args["kl_loss_type"]),
            use_unbiased_kl=bool(args["use_unbiased_kl"]),
            ref_update_interval=args["ref_update_interval"],
            use_rollout_logprobs=bool(args["use_rollout_logprobs"]),
            use_tis=bool(args["use_tis"]),
            tis_clip=float(args["tis_clip"]),
            tis_clip_low=float(args["tis_clip_low"]),
            model_init=args["model_init"],
            hf_checkpoint=args["hf_checkpoint"],
            load=args["critic_load" if is_critic else "load"],
            sequence_parallel=bool(args["sequence_parallel"]) and tp > 1,
            allgather_cp=bool(args["allgather_cp"]),
        )


def _train_iters(args: Mapping[str, Any]) -> int:
    """resolve()'s train_iters (miles: num_rollout * rbs * n // gbs), the steps the LR schedule
    decays over. Unknown only under --num-epoch without --num-rollout, which a constant LR
    does not need."""
    if args["train_iters"] is not None:
        return int(args["train_iters"])
    if args["lr_decay_style"] != "constant" and not args["lr_decay_iters"]:
        raise ValueError(
            f"--lr-decay-style {args['lr_decay_style']} decays over num_rollout * "
            "rollout_batch_size * n_samples_per_prompt // global_batch_size steps, but "
            "num_rollout is unknown: set --num-rollout (or --lr-decay-iters)")
    return 1
