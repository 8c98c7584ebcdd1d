"""Pattern: argument strings from f-strings, implicit concatenation, + and +=, arithmetic."""

from dataclasses import dataclass

import miles.utils.external_utils.command_utils as U
import typer


@dataclass
class ScriptArgs(U.ExecuteTrainConfig):
    data_dir: str = "/data"
    prompts: int = 4
    samples: int = 8
    extra_args: str = ""


def execute(args: ScriptArgs):
    rollout_args = "--rollout-batch-size " f"{args.prompts} "
    rollout_args += f"--n-samples-per-prompt {args.samples} "
    rollout_args = rollout_args + f"--global-batch-size {args.prompts * args.samples // 2} "
    data_args = f"--prompt-data {args.data_dir}/math/train.jsonl --input-key prompt "
    chat = '''--apply-chat-template-kwargs '{"enable_thinking": false}' '''
    train_args = f"{rollout_args} {data_args} {chat} --train-backend fsdp {args.extra_args}"
    U.execute_train(train_args=train_args, num_gpus_per_node=1, megatron_model_type=None)


@U.dataclass_cli
def main(args: ScriptArgs):
    execute(args)


if __name__ == "__main__":
    typer.run(main)
