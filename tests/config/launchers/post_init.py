"""Pattern: __post_init__ derives parallelism from the model name and the hardware."""

from dataclasses import dataclass
from typing import Literal

import miles.utils.external_utils.command_utils as U
import typer


@dataclass
class ScriptArgs(U.ExecuteTrainConfig):
    model_name: str = "Qwen3-4B"
    megatron_model_type: str | None = None
    num_gpus_per_node: int | None = None
    hardware: Literal["H100", "GB200"] = "GB200"

    def __post_init__(self):
        self.megatron_model_type = self.model_name[:1].lower() + self.model_name[1:]
        self.num_gpus_per_node = self.num_gpus_per_node or U.NUM_GPUS_OF_HARDWARE[self.hardware]
        small = self.model_name == "Qwen3-0.6B"
        self.tensor_model_parallel_size = 1 if small else 2
        self.context_parallel_size = 1 if small else 2
        self.use_sequence_parallel = self.tensor_model_parallel_size > 1


def execute(args: ScriptArgs):
    model_parallel = args.tensor_model_parallel_size * args.context_parallel_size
    train_args = (
        f"--tensor-model-parallel-size {args.tensor_model_parallel_size} "
        f"{'--sequence-parallel ' if args.use_sequence_parallel else ''}"
        f"--context-parallel-size {args.context_parallel_size} "
        f"--actor-num-gpus-per-node {args.num_gpus_per_node} "
        f"--rollout-num-gpus-per-engine {model_parallel} "
    )
    U.execute_train(train_args=train_args, num_gpus_per_node=args.num_gpus_per_node,
                    megatron_model_type=args.megatron_model_type)


@U.dataclass_cli
def main(args: ScriptArgs):
    execute(args)


if __name__ == "__main__":
    typer.run(main)
