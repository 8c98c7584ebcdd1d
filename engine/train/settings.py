"""The train worker's hyper-parameters, read once from the resolved args (miles' flag names).

`engine.config.resolve()` gives every dest; the defaults here are miles' and only matter when a
caller (a test, a script) passes a partial dict.
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
    # batches
    global_batch_size: int
    micro_batch_size: int
    use_dynamic_batch_size: bool
    max_tokens_per_gpu: int | None
    log_probs_max_tokens_per_gpu: int | None
    log_probs_chunk_size: int
    train_iters: int
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
    # lifecycle
    offload_train: bool
    model_init: str | None
    hf_checkpoint: str | None
    load: str | None

    @property
    def needs_entropy(self) -> bool:
        return self.entropy_coef != 0.0 or self.observe_training_entropy

    @classmethod
    def from_args(cls, role: Role, args: Mapping[str, Any], world_size: int,
                  cuda: bool) -> TrainSettings:
        """`cuda`: bf16 params with fp32 master weights on GPUs (miles: bf16 = not fp16);
        float32 on the CPU, where bf16 matmuls are slow and the shim is tested."""
        get = args.get
        tp = int(get("tensor_model_parallel_size") or 1)
        pp = int(get("pipeline_model_parallel_size") or 1)
        cp = int(get("context_parallel_size") or 1)
        if cp != 1:
            raise ValueError("--context-parallel-size > 1 is not supported by PPO Deck's engine")
        if world_size % (tp * pp):
            raise ValueError(f"world size {world_size} is not a multiple of TP*PP={tp * pp}")
        samples = int(get("rollout_batch_size") or 1) * int(get("n_samples_per_prompt") or 1)
        gbs = int(get("global_batch_size") or 0) or _gbs_from_steps(get, samples)
        eps_clip = float(_or(get("eps_clip"), 0.2))
        is_critic = role == "critic"
        lr = float(_or(get("lr"), 1e-6))
        return cls(
            role=role,
            tp=tp,
            pp=pp,
            cp=cp,
            seed=int(_or(get("seed"), 1234)),
            bf16=bool(cuda and not get("fp16")),
            use_distributed_optimizer=bool(_or(get("use_distributed_optimizer"), True)),
            global_batch_size=gbs,
            micro_batch_size=int(get("micro_batch_size") or 1),
            use_dynamic_batch_size=bool(get("use_dynamic_batch_size")),
            max_tokens_per_gpu=_opt_int(get("max_tokens_per_gpu")),
            log_probs_max_tokens_per_gpu=_opt_int(
                get("log_probs_max_tokens_per_gpu") or get("max_tokens_per_gpu")),
            log_probs_chunk_size=int(_or(get("log_probs_chunk_size"), -1)),
            train_iters=_train_iters(get, samples, gbs),
            lr=float(_or(get("critic_lr"), lr)) if is_critic else lr,
            min_lr=float(_or(get("min_lr"), 0.0)),
            lr_decay_style=str(get("lr_decay_style") or "constant"),
            lr_warmup_iters=int(
                _or(get("critic_lr_warmup_iters") if is_critic else get("lr_warmup_iters"), 0)),
            lr_warmup_fraction=_opt_float(get("lr_warmup_fraction")),
            lr_decay_iters=_opt_int(get("lr_decay_iters")),
            weight_decay=float(_or(get("weight_decay"), 0.01)),  # Megatron's default
            adam_beta1=float(_or(get("adam_beta1"), 0.9)),
            adam_beta2=float(_or(get("adam_beta2"), 0.999)),
            adam_eps=float(_or(get("adam_eps"), 1e-8)),
            clip_grad=float(_or(get("clip_grad"), 1.0)),
            gamma=float(_or(get("gamma"), 1.0)),
            lambd=float(_or(get("lambd"), 1.0)),
            rollout_temperature=float(_or(get("rollout_temperature"), 1.0)),
            value_clip=float(_or(get("value_clip"), 0.2)),
            eps_clip=eps_clip,
            eps_clip_high=float(_or(get("eps_clip_high"), eps_clip)),
            eps_clip_c=_opt_float(get("eps_clip_c")),
            normalize_advantages=bool(get("normalize_advantages")),
            entropy_coef=float(_or(get("entropy_coef"), 0.0)),
            observe_training_entropy=bool(get("observe_training_entropy")),
            use_kl_loss=bool(get("use_kl_loss")),
            kl_loss_coef=float(_or(get("kl_loss_coef"), 0.0)),
            kl_loss_type=str(get("kl_loss_type") or "k1"),
            use_unbiased_kl=bool(get("use_unbiased_kl")),
            offload_train=bool(get("offload_train")),
            model_init=get("model_init"),
            hf_checkpoint=get("hf_checkpoint"),
            load=(get("critic_load") if is_critic else get("load")),
        )


def _train_iters(get: Any, samples: int, gbs: int) -> int:  # noqa: ANN401
    """miles: train_iters = num_rollout * rbs * n // gbs; the LR schedule decays over it."""
    style = get("lr_decay_style") or "constant"
    if style == "WSD":
        raise ValueError("--lr-decay-style WSD is not supported by PPO Deck's engine")
    num_rollout = get("num_rollout")
    if num_rollout is None:
        if style != "constant" and not get("lr_decay_iters"):
            raise ValueError(
                f"--lr-decay-style {style} decays over num_rollout * rollout_batch_size * "
                "n_samples_per_prompt // global_batch_size steps, but num_rollout is unknown: "
                "set args['num_rollout'] (the rollout manager knows it from the dataset size "
                "under --num-epoch) before creating the train workers")
        return 1
    return max(1, int(num_rollout) * samples // gbs)


def _gbs_from_steps(get: Any, samples: int) -> int:  # noqa: ANN401
    steps = int(get("num_steps_per_rollout") or 1)
    return max(1, samples // steps)


def _or(value: Any, default: Any) -> Any:  # noqa: ANN401
    return default if value is None else value


def _opt_int(value: Any) -> int | None:  # noqa: ANN401
    return None if value is None else int(value)


def _opt_float(value: Any) -> float | None:  # noqa: ANN401
    return None if value is None else float(value)
