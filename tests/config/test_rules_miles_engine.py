"""check(engine="miles"): miles' own rules and the machine checks that bind miles' train.py;
the capability classes of PPO Deck's engine do not apply, and nothing hides miles' errors."""

from __future__ import annotations

import json
import os
from dataclasses import replace

from ppodeck.engine.config import check, resolve
from ppodeck.engine.config.machine import Machine
from ppodeck.engine.host.machine import miles_ft_trainer
from ppodeck.engine.presets import load_preset, resolve_preset

GPUS8 = Machine(gpus=8, transformer_engine=True, sglang=True, env=os.environ)


def codes(config, engine: str, machine: Machine = GPUS8, level: str = "error") -> set[str]:
    return {i.code for i in check(config, machine=machine, engine=engine).issues
            if i.level == level}


def tiny(**values):
    return resolve_preset(load_preset("tiny-cpu")).with_values(**values)


def test_kl_coef_without_an_existing_ref_load_is_miles_error_not_a_refusal(tmp_path) -> None:
    config = tiny(advantage_estimator="grpo", kl_coef=0.1)
    assert codes(config, "ppodeck") == {"engine.refused"}
    assert codes(config, "miles") == {"miles.ref_load_missing"}
    missing = config.with_values(ref_load=str(tmp_path / "nope"))
    [issue] = [i for i in check(missing, machine=GPUS8, engine="miles").errors]
    assert issue.message.startswith(f"ref_load {tmp_path / 'nope'} does not exist")
    (tmp_path / "ref").mkdir()
    assert codes(config.with_values(ref_load=str(tmp_path / "ref")), "miles") == set()


def test_indep_dp_outside_megatron_gets_miles_assert_on_both_engines() -> None:
    config = tiny(advantage_estimator="grpo", indep_dp=True, train_backend="fsdp")
    assert codes(config, "miles") == {"indep_dp.megatron_only"}
    assert "indep_dp.megatron_only" in codes(config, "ppodeck")
    [issue] = [i for i in check(config, machine=GPUS8, engine="miles").errors]
    assert issue.message == "indep_dp requires train_backend='megatron', got 'fsdp'."


def test_debug_rollout_only_under_colocate_gives_the_rollout_the_actor_gpus() -> None:
    config = tiny(debug_rollout_only=True, actor_num_gpus_per_node=4, colocate=True)
    r = resolve(config, os.environ)
    assert (r["colocate"], r["rollout_num_gpus"], r["placement_bundles"]) == (False, 4, 4)
    [info] = [i for i in check(config, machine=GPUS8).infos if i.code == "debug.rollout_only"]
    assert "rollout_num_gpus = 4" in info.message
    # without --colocate the actor's placement follows the rollout's GPUs (miles: <= 8 a node)
    r = resolve(tiny(debug_rollout_only=True, colocate=False, rollout_num_gpus=16), os.environ)
    assert (r["actor_num_nodes"], r["actor_num_gpus_per_node"], r["placement_bundles"]) == (
        2, 8, 16)


def test_miles_needs_the_gpus_here_and_names_ppodeck_own_flags() -> None:
    config = tiny()
    cpu = Machine(gpus=0, transformer_engine=False, sglang=False, env=os.environ)
    assert codes(config, "miles", cpu) == {"miles.gpus_missing"}
    assert "miles.gpus_missing" not in codes(config, "ppodeck", cpu)  # ours runs on CPU
    [own] = [i for i in check(config, machine=GPUS8, engine="miles").warnings
             if i.code == "miles.own_flags"]
    assert own.flags == ("--rollout-backend", "--synthetic-task", "--synthetic-num-prompts",
                         "--model-init", "--max-prompt-len")  # what the launcher leaves out
    assert not any(i.code.startswith(("engine.", "ppodeck."))
                   for i in check(config, machine=GPUS8, engine="miles").issues)


def test_validate_takes_the_engine() -> None:
    from typer.testing import CliRunner

    from ppodeck.app.cli.root import app

    args = ["validate", "tiny-cpu", "--set", "advantage-estimator=grpo", "--set", "kl-coef=0.1",
            "--json"]
    ours = CliRunner().invoke(app, args)
    miles = CliRunner().invoke(app, [*args, "--engine", "miles"])
    ours_errors = {i["code"] for i in json.loads(ours.stdout)["issues"] if i["level"] == "error"}
    assert "engine.refused" in ours_errors and "miles.ref_load_missing" not in ours_errors
    assert "miles.ref_load_missing" in {i["code"] for i in json.loads(
        miles.stdout)["issues"]}
    assert CliRunner().invoke(app, ["validate", "tiny-cpu", "--engine", "x"]).exit_code == 2


def test_megatron_validate_args_asserts_are_miles_errors_with_near_misses() -> None:
    """Megatron's validate_args asserts (arguments.py at the miles-main fork) that the oracle
    of tests/miles_oracle found PPO Deck missing: each refused on both engines (a preset is also
    the miles command it prints), its near miss not."""
    base = resolve_preset(load_preset("qwen3-4b-ppo"))
    refused = {
        "miles.min_lr_above_lr": dict(lr=1e-6, min_lr=1e-5),
        "miles.save_needs_interval": dict(save="/ckpt", save_interval=None),
        "miles.overlap_param_gather_needs_overlap_grad_reduce": dict(
            overlap_param_gather=True, use_distributed_optimizer=True, overlap_grad_reduce=False),
        "miles.seq_length_vs_cp": dict(context_parallel_size=2, seq_length=4098),
        "miles.selective_recompute_method": dict(recompute_granularity="selective",
                                                 recompute_method="uniform"),
    }
    near = [dict(lr=1e-6, min_lr=1e-7), dict(save="/ckpt", save_interval=10),
            dict(overlap_param_gather=True, use_distributed_optimizer=True,
                 overlap_grad_reduce=True),
            dict(context_parallel_size=2, seq_length=4096),
            dict(recompute_granularity="selective", recompute_method=None,
                 recompute_num_layers=None)]
    for code, values in refused.items():
        assert code in codes(base.with_values(**values), "miles"), code
        assert code in codes(base.with_values(**values), "ppodeck"), code
    for values in near:
        assert not {c for c in codes(base.with_values(**values), "miles")
                    if c.startswith("miles.") and c != "miles.ref_load_missing"}, values


def test_miles_holds_model_flags_to_the_hf_config_json(tmp_path) -> None:
    """miles' hf_validate_args (miles/utils/arguments.py:3656-3707): the fields it compares,
    from the file as written, refuse on miles; a matching file does not."""
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({
        "model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4,
        "num_hidden_layers": 2, "intermediate_size": 128, "tie_word_embeddings": True,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000}))
    config = resolve_preset(load_preset("qwen3-4b-ppo")).with_values(
        hf_checkpoint=str(hf), hidden_size=64, num_attention_heads=4, num_layers=2,
        ffn_hidden_size=128, untie_embeddings_and_output_weights=False, norm_epsilon=1e-6,
        rotary_base=1000000, num_query_groups=4)
    assert "miles.hf_config_mismatch" not in codes(config, "miles")
    for values in (dict(num_layers=3), dict(untie_embeddings_and_output_weights=True),
                   dict(norm_epsilon=1e-5), dict(rotary_base=10000)):
        assert "miles.hf_config_mismatch" in codes(config.with_values(**values), "miles"), values


def test_miles_parse_args_pairs_refused_on_miles_with_near_misses() -> None:
    """Pairs miles' parse_args raises on (miles/utils/arguments.py:2912, 2988, 3210); the
    completed pair passes. The tito and bridge pairs are refused on our engine too."""
    base = resolve_preset(load_preset("qwen3-4b-ppo"))
    for code, bad, good, engines in (
            ("miles.tito_needs_session_server", dict(tito_model="qwen3"),
             dict(tito_model="qwen3", use_session_server=True), ("miles", "ppodeck")),
            ("miles.opd_needs_type", dict(use_opd=True), dict(use_opd=True, opd_type="sglang"),
             ("miles",)),
            ("miles.critic_with_bridge", dict(megatron_to_hf_mode="bridge"),
             dict(megatron_to_hf_mode="bridge", advantage_estimator="grpo"),
             ("miles", "ppodeck"))):
        for engine in engines:
            assert code in codes(base.with_values(**bad), engine), (code, engine)
            assert code not in codes(base.with_values(**good), engine), (code, engine)


def test_ft_trainer_in_the_launch_environment_refuses_ppo_on_miles_only() -> None:
    """miles asserts PPO's critic off under MILES_EXPERIMENTAL_FT_TRAINER=1
    (miles/utils/arguments.py:3212); a local miles launch hands train.py this environment,
    our engine never reads the variable."""
    assert miles_ft_trainer({"MILES_EXPERIMENTAL_FT_TRAINER": "on"})
    assert not miles_ft_trainer({"MILES_EXPERIMENTAL_FT_TRAINER": "0"}) and not miles_ft_trainer({})
    base = resolve_preset(load_preset("qwen3-4b-ppo"))
    ft = replace(GPUS8, miles_ft_trainer=True)
    assert "miles.ft_trainer_with_critic" in codes(base, "miles", ft)
    assert "miles.ft_trainer_with_critic" not in codes(base, "ppodeck", ft)
    assert "miles.ft_trainer_with_critic" not in codes(base, "miles")
    grpo = base.with_values(advantage_estimator="grpo")
    assert "miles.ft_trainer_with_critic" not in codes(grpo, "miles", ft)


def test_a_single_file_hf_checkpoint_is_refused_on_miles_only() -> None:
    """miles reads --hf-checkpoint with AutoConfig (miles/utils/hf_config.py:106); the GGUF
    PPO Deck's engine converts itself is no directory with a config.json."""
    config = resolve_preset(load_preset("smollm2-135m-cpu"))
    assert "miles.hf_checkpoint_not_a_directory" in codes(config, "miles")
    assert "miles.hf_checkpoint_not_a_directory" not in codes(config, "ppodeck")
    assert "miles.hf_checkpoint_not_a_directory" not in codes(
        resolve_preset(load_preset("qwen3-4b-ppo")), "miles")
