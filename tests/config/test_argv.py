"""RunConfig <-> argv, and pasted command lines."""

from __future__ import annotations

from ppodeck.engine.config import parse_argv, to_argv
from ppodeck.engine.miles.script_import import parse_command_line

from .conftest import make_config


def test_to_argv_orders_by_schema_and_keeps_passthrough() -> None:
    cfg = make_config(kl_coef=0.0, colocate=True, offload_train=False, lr=1e-6,
                      eval_prompt_data=("aime", "/d/aime.jsonl"))
    cfg = cfg.with_passthrough(("--sglang-foo", "1"))
    argv = to_argv(cfg)
    assert argv[-2:] == ["--sglang-foo", "1"]
    assert "--colocate" in argv and "--no-offload-train" in argv
    assert argv[argv.index("--lr") + 1] == "1e-06"
    assert argv[argv.index("--eval-prompt-data") + 1:][:2] == ["aime", "/d/aime.jsonl"]


def test_tristate_emits_only_when_set() -> None:
    assert "--offload-train" not in to_argv(make_config())
    assert to_argv(make_config(offload_train=True)) == ["--offload-train"]
    assert to_argv(make_config(offload_train=False)) == ["--no-offload-train"]
    cfg, _ = parse_argv(["--no-offload-train"])
    assert cfg.values == {"offload_train": False}


def test_secrets_masked() -> None:
    cfg = make_config(wandb_key="s3cret")
    assert "s3cret" not in to_argv(cfg, show_secrets=False)
    assert "s3cret" in to_argv(cfg)


def test_round_trip_values() -> None:
    cfg = make_config(lr=1e-6, eps_clip=4e-4, num_rollout=3, colocate=True, rm_type="deepscaler",
                      offload_rollout=False, offload_rollout_level=("kv_cache",))
    back, issues = parse_argv(to_argv(cfg))
    assert dict(back.values) == dict(cfg.values) and not issues


def test_unknown_flag_kept_with_did_you_mean() -> None:
    cfg, issues = parse_argv(["--kl-coeff", "0.1", "--custom-thing", "a", "b", "--lr", "2e-6"])
    assert cfg.passthrough == ("--kl-coeff", "0.1", "--custom-thing", "a", "b")
    assert cfg.values == {"lr": 2e-6}
    [typo, other] = issues
    assert typo.flags == ("--kl-coeff",) and typo.fix == "did you mean --kl-coef?"
    assert typo.level == "warning" and "miles flag" in other.message


def test_sglang_flags_checked_against_sglang_server_args() -> None:
    _, issues = parse_argv(["--sglang-log-level", "info", "--sglang-log-levl", "info"])
    [known, typo] = issues
    assert known.code == "argv.unknown_flag" and "SGLang's server argument" in known.message
    assert typo.code == "argv.unknown_sglang_flag" and "miles would reject" in typo.message


def test_equals_form_and_bad_value_kept_as_text() -> None:
    cfg, issues = parse_argv(["--lr=abc", "--num-rollout=3", "--colocate=false"])
    assert cfg.values["lr"] == "abc" and cfg.values["num_rollout"] == 3
    assert "colocate" in cfg.values and cfg.values["colocate"] is False
    assert not issues


def test_missing_value_and_stray_token() -> None:
    _, issues = parse_argv(["stray", "--lr"])
    assert [i.code for i in issues] == ["argv.stray_token", "argv.missing_value"]
    assert issues[1].flags == ("--lr",)


def test_repeated_flag_last_wins() -> None:
    cfg, issues = parse_argv(["--lr", "1", "--lr", "2"])
    assert cfg.values["lr"] == 2.0 and issues[0].code == "argv.repeated_flag"


def test_command_line_python_train() -> None:
    cfg, issues = parse_command_line("python3 train.py --advantage-estimator ppo --lr 1e-6")
    assert cfg.values == {"advantage_estimator": "ppo", "lr": 1e-6} and not issues


def test_command_line_ray_job_submit_bash() -> None:
    text = """
    #!/bin/bash
    MODEL_DIR=/root/models
    export LR="1e-6"
    CKPT_ARGS=(
       --hf-checkpoint ${MODEL_DIR}/Qwen3-4B/   # the HF weights
       --ref-load /root/Qwen3-4B_torch_dist
    )
    ray job submit --address="http://127.0.0.1:8265" \\
       --runtime-env-json='{"env_vars": {"PYTHONPATH": "/root/Megatron-LM/"}}' \\
       -- python3 train.py \\
       --actor-num-nodes 1 --actor-num-gpus-per-node 4 --colocate \\
       ${CKPT_ARGS[@]} --lr $LR --save $OUT/ckpt
    """
    cfg, issues = parse_command_line(text)
    assert cfg.values["hf_checkpoint"] == "/root/models/Qwen3-4B/"
    assert cfg.values["ref_load"] == "/root/Qwen3-4B_torch_dist"
    assert cfg.values["lr"] == 1e-6 and cfg.values["colocate"] is True
    assert cfg.values["save"] == "$OUT/ckpt"  # kept verbatim
    [unresolved] = [i for i in issues if i.code == "command.unresolved_variable"]
    assert unresolved.flags == ("$OUT",) and "OUT" in unresolved.message


def test_command_line_env_and_defaults() -> None:
    cfg, issues = parse_command_line("train.py --load ${CKPT:-/ckpt} --save $HOME/x",
                                     env={"HOME": "/home/me"})
    assert cfg.values == {"load": "/ckpt", "save": "/home/me/x"} and not issues


def test_command_line_just_flags() -> None:
    cfg, _ = parse_command_line("--num-rollout 3 \\\n --colocate")
    assert cfg.values == {"num_rollout": 3, "colocate": True}
