"""The flag schema: one declaration per flag, miles names, the required coverage."""

from __future__ import annotations

import pytest

from ppodeck.engine.config import BY_DEST, BY_NAME, FLAGS
from ppodeck.engine.config.schema import GROUPS

# Every flag of the miles PPO example and its CI test (examples/ppo/run_qwen3_4b_ppo.py,
# tests/e2e/megatron/test_qwen3_4B_ppo.py), plus those the seed
# page and issue #2 name.
REQUIRED = """
--hf-checkpoint --ref-load --load --save --save-interval --prompt-data --input-key --label-key
--apply-chat-template --rollout-shuffle --rm-type --num-rollout --rollout-batch-size
--n-samples-per-prompt --rollout-max-response-len --rollout-temperature --global-batch-size
--balance-data --optimizer --lr --lr-decay-style --weight-decay --adam-beta1 --adam-beta2
--advantage-estimator --critic-lr --num-critic-only-steps --normalize-advantages --use-kl-loss
--kl-loss-coef --kl-loss-type --kl-coef --entropy-coef --eps-clip --use-wandb --wandb-project
--wandb-group --wandb-key --disable-wandb-random-suffix --tensor-model-parallel-size
--pipeline-model-parallel-size --context-parallel-size --recompute-granularity
--recompute-method --recompute-num-layers --use-dynamic-batch-size --max-tokens-per-gpu
--rollout-num-gpus-per-engine --sglang-mem-fraction-static --sglang-max-running-requests
--attention-dropout --hidden-dropout --accumulate-allreduce-grads-in-fp32
--attention-softmax-in-fp32 --attention-backend --actor-num-nodes --actor-num-gpus-per-node
--colocate --eval-interval --eval-prompt-data --n-samples-per-eval-prompt
--eval-max-response-len --eval-top-k --sglang-enable-metrics --ci-test
--swiglu --num-layers --hidden-size --ffn-hidden-size --num-attention-heads
--group-query-attention --num-query-groups --use-rotary-position-embeddings
--disable-bias-linear --normalization --norm-epsilon --rotary-base --vocab-size --kv-channels
--qk-layernorm --untie-embeddings-and-output-weights --seq-length --max-position-embeddings
--critic-load --critic-save --critic-lr-warmup-iters --critic-num-nodes
--critic-num-gpus-per-node --offload-train --no-offload-train --train-backend
--megatron-to-hf-mode --indep-dp --gamma --lambd --value-clip --eps-clip-high --eps-clip-c
--micro-batch-size --lr-warmup-iters --clip-grad --seed --rollout-top-p --rollout-top-k
--rollout-seed --metadata-key --custom-rm-path --offload --offload-rollout --no-offload-rollout
--rollout-num-gpus --num-gpus-per-node --debug-rollout-only --debug-train-only
--use-rollout-logprobs --use-tis --keep-old-actor --update-weight-transfer-mode
--num-steps-per-rollout --num-epoch --over-sampling-batch-size --rollout-backend --ray-address
--run-dir --synthetic-task --synthetic-num-prompts --model-init --max-prompt-len
""".split()


@pytest.mark.parametrize("name", REQUIRED)
def test_required_flag_is_declared(name: str) -> None:
    assert name in BY_NAME


def test_each_flag_declared_once() -> None:
    assert len({f.name for f in FLAGS}) == len(FLAGS) == len(BY_DEST)


def test_flags_are_well_formed() -> None:
    for flag in FLAGS:
        assert flag.group in GROUPS
        assert flag.help.strip(), flag.name
        if flag.kind == "choice":
            assert flag.choices and (flag.default is None or flag.default in flag.choices)


def test_own_flags_live_in_ppodeck_group() -> None:
    own = {f.name for f in FLAGS if f.own}
    assert own == {"--rollout-backend", "--ray-address", "--run-dir", "--synthetic-task",
                   "--synthetic-num-prompts", "--model-init", "--max-prompt-len",
                   "--samples-per-rollout"}
    assert all(BY_NAME[n].group == "ppodeck" for n in own)
    assert BY_NAME["--rollout-backend"].default == "auto"
    assert BY_NAME["--ray-address"].default is None


def test_miles_defaults() -> None:
    defaults = {"--advantage-estimator": "grpo", "--eps-clip": 0.2, "--value-clip": 0.2,
                "--gamma": 1.0, "--lambd": 1.0, "--kl-loss-type": "k1", "--lr": 1e-6,
                "--seed": 1234, "--actor-num-gpus-per-node": 8, "--rollout-seed": 42,
                "--num-critic-only-steps": 0, "--critic-lr": None, "--train-backend": "megatron",
                "--megatron-to-hf-mode": "raw", "--offload-train": None}
    assert {n: BY_NAME[n].default for n in defaults} == defaults


def test_tristate_and_markers() -> None:
    offload = BY_NAME["--offload-train"]
    assert offload.kind == "tristate" and offload.negative == "--no-offload-train"
    assert BY_NAME["--no-offload-train"] is offload
    assert offload.dest == "offload_train"
    assert BY_NAME["--wandb-key"].secret
    assert BY_NAME["--custom-rm-path"].runs_code
    assert BY_NAME["--colocate"].negative is None
