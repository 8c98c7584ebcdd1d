"""Pattern: prepare() downloads the model and the data and converts the checkpoint."""

from dataclasses import dataclass

import miles.utils.external_utils.command_utils as U
import typer


@dataclass
class ScriptArgs(U.ExecuteTrainConfig):
    model_name: str = "Qwen3-0.6B"
    model_dir: str = "/cache/models"
    data_dir: str = "/cache/datasets"


def prepare(args: ScriptArgs):
    U.exec_command_cpu(f"mkdir -p {args.model_dir} {args.data_dir}")
    U.exec_command_cpu(
        f"hf download Qwen/{args.model_name} --local-dir {args.model_dir}/{args.model_name}")
    U.hf_download_dataset("someone/gsm8k-mini", data_dir=args.data_dir)
    U.hf_download_dataset("someone/aime-eval", data_dir=args.data_dir)
    U.convert_checkpoint(model_name=args.model_name, megatron_model_type="qwen3-0.6B",
                         num_gpus_per_node=1, dir_dst=args.model_dir,
                         hf_checkpoint=f"{args.model_dir}/{args.model_name}")


def execute(args: ScriptArgs):
    train_args = (
        f"--hf-checkpoint {args.model_dir}/{args.model_name} "
        f"--ref-load {args.model_dir}/{args.model_name}_torch_dist "
        f"--prompt-data {args.data_dir}/gsm8k-mini/train.parquet "
    )
    U.execute_train(train_args=train_args, num_gpus_per_node=1,
                    megatron_model_type="qwen3-0.6B")


@U.dataclass_cli
def main(args: ScriptArgs):
    prepare(args)
    execute(args)


if __name__ == "__main__":
    typer.run(main)
