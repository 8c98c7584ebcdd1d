"""The seed recipe as a miles launcher: Qwen3-4B actor-critic PPO on DAPO-Math-17k, 4 GPUs.

Written for PPO Deck's tests from the seed's description (docs/examples/ppo.md): the values
are the example's, the code is ours. Test data, never run: tests read it with
engine.miles.py_launcher.
"""

from dataclasses import dataclass

import miles.utils.external_utils.command_utils as U
import typer


@dataclass
class ScriptArgs(U.ExecuteTrainConfig):
    run_id: str = U.create_run_id()
    model_name: str = "Qwen3-4B"
    megatron_model_type: str = "qwen3-4B"
    num_gpus_per_node: int = 4  # the actor's world, shared by the critic: TP * PP * CP
    data_dir: str = "/root/datasets"
    model_dir: str = "/root/models"
    megatron_path: str = "/root/Megatron-LM"
    extra_args: str = ""


def prepare(args: ScriptArgs):
    hf_dir = f"{args.model_dir}/{args.model_name}"
    U.exec_command_cpu(f"mkdir -p {args.model_dir} {args.data_dir}")
    U.exec_command_cpu(f"hf download Qwen/{args.model_name} --local-dir {hf_dir}")
    U.hf_download_dataset("zhuzilin/dapo-math-17k", data_dir=args.data_dir)
    U.convert_checkpoint(
        model_name=args.model_name,
        megatron_model_type=args.megatron_model_type,
        num_gpus_per_node=args.num_gpus_per_node,
        dir_dst=args.model_dir,
        hf_checkpoint=hf_dir,
        megatron_path=args.megatron_path,
    )


def execute(args: ScriptArgs):
    checkpoints = f"{args.output_dir}/{args.run_id}/checkpoints"
    checkpoint_flags = (
        f"--hf-checkpoint {args.model_dir}/{args.model_name}/ "
        f"--ref-load {args.model_dir}/{args.model_name}_torch_dist "
        f"--load {checkpoints} --save {checkpoints} --save-interval 20 "
    )
    data_flags = (
        f"--prompt-data {args.data_dir}/dapo-math-17k/dapo-math-17k.jsonl "
        "--input-key prompt --label-key label --apply-chat-template --rollout-shuffle "
        "--rm-type deepscaler "
    )
    batch_flags = (
        "--num-rollout 300 --rollout-batch-size 8 --n-samples-per-prompt 8 "
        "--rollout-max-response-len 8192 --rollout-temperature 0.8 "
        "--global-batch-size 32 --balance-data "
    )
    parallel_flags = (
        "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 "
        "--context-parallel-size 2 "
        "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 "
        "--use-dynamic-batch-size --max-tokens-per-gpu 16384 "
    )
    # the one flag that makes it PPO; the rest tunes the critic and the loss
    ppo_flags = (
        "--advantage-estimator ppo --critic-lr 1e-5 --num-critic-only-steps 1 "
        "--normalize-advantages --use-kl-loss --kl-loss-coef 0.00 --kl-loss-type k1 "
        "--kl-coef 0.00 --entropy-coef 0.00 --eps-clip 0.2 "
    )
    adam_flags = (
        "--optimizer adam --lr 1e-6 --lr-decay-style constant --weight-decay 0.1 "
        "--adam-beta1 0.9 --adam-beta2 0.98 "
    )
    rollout_engine_flags = (
        "--rollout-num-gpus-per-engine 1 --sglang-mem-fraction-static 0.8 "
        "--sglang-max-running-requests 512 "
    )
    placement_flags = (
        "--attention-dropout 0.0 --hidden-dropout 0.0 "
        "--accumulate-allreduce-grads-in-fp32 --attention-softmax-in-fp32 "
        "--attention-backend flash "
        f"--actor-num-nodes 1 --actor-num-gpus-per-node {args.num_gpus_per_node} --colocate "
    )
    wandb = U.get_default_wandb_args(__file__, run_id=args.run_id)
    train_args = (
        f"{checkpoint_flags} {data_flags} {batch_flags} {adam_flags} {ppo_flags} {wandb} "
        f"{parallel_flags} {rollout_engine_flags} {placement_flags} {args.extra_args} "
    )
    U.execute_train(
        train_args=train_args,
        num_gpus_per_node=args.num_gpus_per_node,
        megatron_model_type=args.megatron_model_type,
        megatron_path=args.megatron_path,
        extra_env_vars={"PYTHONPATH": args.megatron_path},
    )


@U.dataclass_cli
def main(args: ScriptArgs):
    prepare(args)
    execute(args)


if __name__ == "__main__":
    typer.run(main)
