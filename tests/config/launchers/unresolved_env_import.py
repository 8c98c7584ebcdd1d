"""Pattern: values that depend on miles' code, the environment, or an unknown call."""

import os
from dataclasses import dataclass

import miles.utils.external_utils.command_utils as U
import typer
from miles.recipes import pick_parallelism


@dataclass
class ScriptArgs(U.ExecuteTrainConfig):
    model_name: str = "Qwen3-4B"
    megatron_model_type: str = "qwen3-4B"


def execute(args: ScriptArgs):
    parallel_args = pick_parallelism(args.model_name)
    data = os.environ["DATA_ROOT"]
    seed = os.environ.get("ROLLOUT_SEED", "42")
    train_args = (
        f"--prompt-data {data}/train.jsonl "
        f"--num-rollout 10 {parallel_args} --rollout-seed {seed} "
    )
    U.execute_train(train_args=train_args, num_gpus_per_node=4,
                    megatron_model_type=args.megatron_model_type)


@U.dataclass_cli
def main(args: ScriptArgs):
    execute(args)


if __name__ == "__main__":
    typer.run(main)
