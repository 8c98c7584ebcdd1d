"""Pattern: miles' wandb helper, which adds flags only when WANDB_API_KEY is set."""

from dataclasses import dataclass

import miles.utils.external_utils.command_utils as U
import typer


@dataclass
class ScriptArgs(U.ExecuteTrainConfig):
    run_id: str = "exp-7"


def execute(args: ScriptArgs):
    wandb_args = U.get_default_wandb_args(__file__, run_id=args.run_id)
    train_args = f"--num-rollout 5 {wandb_args} --train-backend fsdp "
    U.execute_train(train_args=train_args, num_gpus_per_node=1, megatron_model_type=None)


@U.dataclass_cli
def main(args: ScriptArgs):
    execute(args)


if __name__ == "__main__":
    typer.run(main)
