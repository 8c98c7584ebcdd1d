"""Pattern: ScriptArgs field defaults (and ExecuteTrainConfig's inherited output_dir)."""

from dataclasses import dataclass, field

import miles.utils.external_utils.command_utils as U
import typer


@dataclass
class ScriptArgs(U.ExecuteTrainConfig):
    model_name: str = "Qwen3-0.6B"
    megatron_model_type: str = "qwen3-0.6B"
    num_gpus_per_node: int = 2
    rollout_batch_size: int = field(default=16)
    lr: float = 2e-6
    colocate: bool = True


def execute(args: ScriptArgs):
    train_args = (
        f"--hf-checkpoint /models/{args.model_name} "
        f"--save {args.output_dir}/ckpt "
        f"--rollout-batch-size {args.rollout_batch_size} "
        f"--lr {args.lr} "
        f"--actor-num-gpus-per-node {args.num_gpus_per_node} "
        f"{'--colocate ' if args.colocate else ''}"
    )
    U.execute_train(train_args=train_args, num_gpus_per_node=args.num_gpus_per_node,
                    megatron_model_type=args.megatron_model_type)


@U.dataclass_cli
def main(args: ScriptArgs):
    execute(args)


if __name__ == "__main__":
    typer.run(main)
