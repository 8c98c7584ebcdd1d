"""Pattern: if/else, conditional expressions and match on the launcher's mode."""

from dataclasses import dataclass
from typing import Literal

import miles.utils.external_utils.command_utils as U
import typer


@dataclass
class ScriptArgs(U.ExecuteTrainConfig):
    mode: Literal["normal", "debug_minimal"] = "normal"
    model_name: str = "Qwen3-4B"
    num_gpus_per_node: int = 8
    enable_eval: bool = True
    train_backend: Literal["megatron", "fsdp"] = "megatron"


def execute(args: ScriptArgs):
    debug = args.mode == "debug_minimal"
    rollout_args = (
        f"--num-rollout {2 if debug else 3000} "
        f"--rollout-max-response-len {100 if args.mode == 'debug_minimal' else 8192} "
    )
    if args.enable_eval and not debug:
        rollout_args += "--eval-interval 20 "
    else:
        rollout_args += "--save-interval 2 "
    match args.train_backend:
        case "fsdp":
            backend_args = "--train-backend fsdp "
        case "megatron":
            backend_args = "--tensor-model-parallel-size 2 "
        case _:
            raise NotImplementedError
    U.execute_train(train_args=rollout_args + backend_args,
                    num_gpus_per_node=args.num_gpus_per_node,
                    megatron_model_type=None if args.train_backend == "fsdp" else "qwen3-4B")


@U.dataclass_cli
def main(args: ScriptArgs):
    execute(args)


if __name__ == "__main__":
    typer.run(main)
