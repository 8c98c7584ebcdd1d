"""miles' Python launchers, read without running them: one small launcher per pattern
(tests/config/launchers/, written for these tests), plus the seed recipe."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ppodeck.engine.config.derived import derive
from ppodeck.engine.miles.py_launcher import LauncherError, is_python_launcher
from ppodeck.engine.miles.script_import import import_script

LAUNCHERS = Path(__file__).parent / "launchers"
DERIVED = ("world_size", "dp_size", "rollout_engines", "samples_per_rollout",
           "actor_steps_per_rollout", "critic_steps_per_rollout", "total_train_iters", "params")


def imported(name: str, env: dict[str, str] | None = None, **kwargs):
    path = LAUNCHERS / name
    return import_script(path.read_text(), env=env or {}, path=path, **kwargs)


def codes(report) -> list[str]:
    return [i.code for i in report.issues]


def test_the_seed_launcher_imports_to_the_seed_presets_derived_values() -> None:
    from ppodeck.app.cli.common import resolve_or_fail
    from ppodeck.engine.presets import load_preset

    report = imported("seed_ppo.py")
    preset = derive(resolve_or_fail(load_preset("qwen3-4b-ppo")), os.environ)
    launcher = derive(report.config, os.environ)
    assert {d: getattr(launcher, d) for d in DERIVED} == {d: getattr(preset, d) for d in DERIVED}
    assert report.language == "python" and report.unresolved == [] and report.problems == []
    assert report.lines()[0].startswith("import report: seed_ppo.py (read as a Python launcher")
    assert report.config.get("advantage_estimator") == "ppo"
    assert report.sources == {"hf-checkpoint": "Qwen/Qwen3-4B",
                              "prompt-data": "zhuzilin/dapo-math-17k"}


def test_dataclass_defaults_and_inherited_fields_fill_the_flags() -> None:
    report = imported("dataclass_defaults.py")
    values = report.config.values
    assert values["hf_checkpoint"] == "/models/Qwen3-0.6B"
    assert values["save"] == "/root/shared_data/ckpt"  # ExecuteTrainConfig.output_dir
    assert (values["rollout_batch_size"], values["lr"], values["colocate"]) == (16, 2e-6, True)
    assert values["actor_num_gpus_per_node"] == 2
    assert values["num_layers"] == 28  # megatron_model_type qwen3-0.6B, built-in table
    assert report.flag_comment("--rollout-batch-size") == (
        "dataclass_defaults.py:23 via args.rollout_batch_size (dataclass_defaults.py:14)")
    assert report.flag_comment("--num-layers").startswith("qwen3-0.6B (dataclass_defaults.py:")
    assert any("$SLURM_JOB_NUM_NODES" in n.why for n in report.notes)  # num_nodes' default


def test_post_init_derives_parallelism_from_model_and_hardware() -> None:
    values = imported("post_init.py").config.values
    assert values["actor_num_gpus_per_node"] == 4  # GB200 in miles' hardware table
    assert (values["tensor_model_parallel_size"], values["context_parallel_size"]) == (2, 2)
    assert values["sequence_parallel"] is True and values["rollout_num_gpus_per_engine"] == 4
    assert values["hidden_size"] == 2560  # qwen3-4B, derived from the model name
    small = imported("post_init.py", overrides=["--model-name", "Qwen3-0.6B",
                                                "--num-gpus-per-node", "1"]).config.values
    assert (small["tensor_model_parallel_size"], small["actor_num_gpus_per_node"]) == (1, 1)
    assert "sequence_parallel" not in small and small["hidden_size"] == 1024


def test_fstrings_concatenation_and_arithmetic() -> None:
    report = imported("fstrings_concat.py")
    values = report.config.values
    assert (values["rollout_batch_size"], values["n_samples_per_prompt"],
            values["global_batch_size"]) == (4, 8, 16)
    assert values["prompt_data"] == "/data/math/train.jsonl"
    assert values["apply_chat_template_kwargs"] == '{"enable_thinking": false}'  # quotes off
    assert values["train_backend"] == "fsdp" and "num_layers" not in values
    assert report.unresolved == [] and report.config.passthrough == ()


def test_conditionals_follow_the_mode_and_overrides_switch_them() -> None:
    normal = imported("mode_conditionals.py").config.values
    assert (normal["num_rollout"], normal["rollout_max_response_len"]) == (3000, 8192)
    assert normal["eval_interval"] == 20 and "save_interval" not in normal
    assert normal["tensor_model_parallel_size"] == 2 and normal["num_layers"] == 36
    debug = imported("mode_conditionals.py", overrides=[
        "--mode", "debug_minimal", "--train-backend=fsdp", "--no-enable-eval"]).config.values
    assert (debug["num_rollout"], debug["rollout_max_response_len"]) == (2, 100)
    assert debug["save_interval"] == 2 and "eval_interval" not in debug
    assert debug["train_backend"] == "fsdp" and "num_layers" not in debug


@pytest.mark.parametrize(("overrides", "message"), [
    (["--model-nam", "x"], "--model-nam is not a field of the launcher's ScriptArgs (line 11)"
                           ". Did you mean --model-name?"),
    (["--mode", "fast"], "--mode 'fast': not one of normal, debug_minimal"),
    (["--num-gpus-per-node", "four"], "--num-gpus-per-node 'four': expected int"),
    (["--mode"], "--mode needs a value"),
    (["debug"], "'debug' is not an option"),
])
def test_bad_overrides_say_what_and_how_to_fix(overrides: list[str], message: str) -> None:
    with pytest.raises(LauncherError, match=None) as caught:
        imported("mode_conditionals.py", overrides=overrides)
    assert message in str(caught.value)


def test_overrides_on_a_bash_script_are_refused() -> None:
    with pytest.raises(LauncherError, match="apply to miles' Python launchers"):
        import_script("python3 train.py --lr 1e-6", env={}, overrides=["--mode", "x"])


def test_wandb_helper_adds_flags_only_with_a_key_and_never_writes_it() -> None:
    without = imported("wandb_helper.py")
    assert "use_wandb" not in without.config.values and without.config.get("num_rollout") == 5
    assert any("WANDB_API_KEY is not set" in n.why for n in without.notes)
    with_key = imported("wandb_helper.py", env={"WANDB_API_KEY": "secret-key"})
    values = with_key.config.values
    assert values["use_wandb"] is True and values["wandb_project"] == "miles-wandb_helper"
    assert values["wandb_group"] == "exp-7" and "secret-key" not in str(values)


def test_prepare_steps_become_preset_sources_and_report_lines() -> None:
    report = imported("prepare_steps.py")
    assert report.sources == {"hf-checkpoint": "Qwen/Qwen3-0.6B",
                              "prompt-data": "someone/gsm8k-mini"}
    text = "\n".join(report.prepare)
    assert "download model Qwen/Qwen3-0.6B -> --hf-checkpoint /cache/models/Qwen3-0.6B" in text
    assert "someone/aime-eval -> /cache/datasets/aime-eval: no --prompt-data reads it" in text
    assert "convert /cache/models/Qwen3-0.6B -> --ref-load /cache/models/Qwen3-0.6B_torch_dist" \
        in text
    assert "mkdir" not in text  # making directories is no step of its own


def test_imports_and_environment_are_reported_unresolved_with_lines() -> None:
    report = imported("unresolved_env_import.py")
    described = [u.describe() for u in report.unresolved]
    assert "$DATA_ROOT (unresolved_env_import.py:19): an environment variable that is not set "\
        "here" in described
    assert any(d.startswith("pick_parallelism(args.model_name) (unresolved_env_import.py:18)")
               and "miles.recipes.pick_parallelism" in d and "left out of the train args" in d
               for d in described), described
    values = report.config.values
    assert values["num_rollout"] == 10 and values["rollout_seed"] == 42  # env default, noted
    assert any(n.what == "$ROLLOUT_SEED" for n in report.notes)
    assert values["prompt_data"] == "{data}/train.jsonl"  # kept verbatim, named above
    assert report.config.passthrough == ()  # the loose unknown is not a stray token
    with_env = imported("unresolved_env_import.py", env={"DATA_ROOT": "/d", "ROLLOUT_SEED": "7"})
    assert with_env.config.get("prompt_data") == "/d/train.jsonl"
    assert with_env.config.get("rollout_seed") == 7
    assert with_env.flag_comment("--rollout-seed").endswith("via $ROLLOUT_SEED from the "
                                                           "environment")


def test_a_launcher_that_static_reading_cannot_follow_says_why() -> None:
    text = ("import miles.utils.external_utils.command_utils as U\n"
            "from miles.launch import build\n\n"
            "def main():\n    U.execute_train(**build())\n\n"
            "if __name__ == '__main__':\n    main()\n")
    report = import_script(text, env={}, name="run_custom.py")
    assert "launcher.not_static" in codes(report) and report.language == "python"
    assert any("train_args depend on build() (line 5): calls miles.launch.build, imported "
               "from miles" in p for p in report.problems), report.problems
    assert report.config.values == {}
    assert any("static reading is not enough" in line for line in report.lines())


def test_a_raise_on_the_default_values_is_reported_with_its_message() -> None:
    text = ("from dataclasses import dataclass\n"
            "import miles.utils.external_utils.command_utils as U\n\n"
            "@dataclass\nclass ScriptArgs(U.ExecuteTrainConfig):\n    gpus: int = 8\n\n"
            "@U.dataclass_cli\ndef main(args: ScriptArgs):\n"
            "    if args.gpus != 16:\n"
            "        raise NotImplementedError(f'no layout for {args.gpus} GPUs')\n")
    report = import_script(text, env={}, name="run_big.py")
    assert any(u.line == 11 and "'no layout for 8 GPUs'" in u.why for u in report.unresolved)
    assert import_script(text, env={}, name="run_big.py", overrides=["--gpus", "16"]).unresolved \
        == []


def test_python_is_detected_by_extension_shebang_or_content() -> None:
    assert is_python_launcher("x = 1", Path("run.py"))
    assert is_python_launcher("#!/usr/bin/env python3\nprint(1)\n")
    assert is_python_launcher("import typer\n\ndef main():\n    pass\n")
    assert not is_python_launcher("#!/bin/bash\nexport A=1\n")
    assert not is_python_launcher("python3 train.py --lr 1e-6 --num-rollout 3")
    assert not is_python_launcher("X=1\npython3 train.py ${ARGS[@]}\n")


def test_commands_of_other_programs_are_not_train_flags() -> None:
    text = (LAUNCHERS / "prepare_steps.py").read_text()
    report = import_script(text, env={}, name="prepare_steps.py")
    assert "local_dir" not in report.config.values  # `hf download --local-dir` stays a step
    assert all(not w.startswith("--local-dir") for w in report.config.passthrough)


SUBSET = '''
import re
import sys
from dataclasses import dataclass

import miles.utils.external_utils.command_utils as U


@dataclass
class Recipe:
    tp: int
    response_len: int = 4096


RECIPES = {"small": Recipe(1), "big": Recipe(tp=4, response_len=8192)}


@dataclass
class ScriptArgs(U.ExecuteTrainConfig):
    recipe_name: str = "big"
    model_name: str = "Qwen3-4B-5layer"
    hardware: str = "H100"

    @property
    def recipe(self) -> Recipe:
        return RECIPES[self.recipe_name]


@U.dataclass_cli
def main(args: ScriptArgs):
    if (m := re.search(r"(\\d+)layer", args.model_name)) is None:
        sys.exit(1)
    graph_bs = " ".join(map(str, [1, 2, *range(8, 17, 8)]))
    match (args.hardware, args.num_nodes):
        case ("H100", 1):
            engines = 8 // args.recipe.tp
        case _:
            raise NotImplementedError(f"no layout for {args.hardware}")
    U.execute_train(
        train_args=(f"--tensor-model-parallel-size {args.recipe.tp} --num-layers {m.group(1)} "
                    f"--rollout-max-response-len {args.recipe.response_len} "
                    f"--sglang-cuda-graph-bs {graph_bs} --rollout-num-gpus {engines} "),
        num_gpus_per_node=8, megatron_model_type=None)
'''


def test_the_python_subset_miles_launchers_use() -> None:
    report = import_script(SUBSET, env={}, name="run_subset.py")
    values = report.config.values
    assert (values["tensor_model_parallel_size"], values["num_layers"],
            values["rollout_max_response_len"], values["rollout_num_gpus"]) == (4, 5, 8192, 2)
    assert values["sglang_cuda_graph_bs"] == ("1", "2", "8", "16")
    assert report.unresolved == [] and report.problems == []
    stopped = import_script(SUBSET, env={}, name="run_subset.py",
                            overrides=["--model-name", "Qwen3-4B"])
    assert any(u.what == "sys.exit (1)" and u.line == 32 for u in stopped.unresolved)
    assert any("it stops at line 32" in p for p in stopped.problems)
    other = import_script(SUBSET, env={}, name="run_subset.py", overrides=["--hardware=GB200"])
    assert any("'no layout for GB200'" in u.why for u in other.unresolved)


def _tiny_checkout(root: Path) -> Path:
    """A miles checkout's shape, generated: the `miles` package and a model file by name."""
    (root / "miles").mkdir(parents=True)
    (root / "miles" / "__init__.py").write_text("")
    (root / "scripts" / "models").mkdir(parents=True)
    (root / "scripts" / "models" / "deck-test-7L.py").write_text(
        "import os\n\n\ndef model_args() -> str:\n    layers = os.environ.get("
        "'MODEL_ARGS_NUM_LAYERS', '7')\n    return (\n        f'--num-layers {layers} '\n"
        "        '--hidden-size 96 --num-attention-heads 6 --ffn-hidden-size 384 '\n    )\n")
    launcher = root / "scripts" / "run_deck_test.py"
    launcher.write_text(
        "import miles.utils.external_utils.command_utils as U\n\n"
        "def main():\n"
        "    U.execute_train(train_args='--num-rollout 2 ', num_gpus_per_node=1,\n"
        "                    megatron_model_type='deck-test-7L')\n\n"
        "if __name__ == '__main__':\n    main()\n")
    return launcher


def test_a_launcher_inside_a_miles_checkout_takes_its_model_file_and_names_it(
        tmp_path: Path) -> None:
    launcher = _tiny_checkout(tmp_path / "miles-checkout")
    report = import_script(launcher.read_text(), env={}, path=launcher)
    values = report.config.values
    assert (values["num_layers"], values["hidden_size"], values["num_attention_heads"]) == \
        (7, 96, 6)
    model_file = tmp_path / "miles-checkout" / "scripts" / "models" / "deck-test-7L.py"
    assert f"model args of deck-test-7L (line 4): {model_file}" in report.launcher
    assert any(line.startswith(f"miles checkout: {tmp_path / 'miles-checkout'}")
               for line in report.launcher)
    # the same text pasted with no path knows no checkout: the shape stays unresolved, said so
    pasted = import_script(launcher.read_text(), env={}, name="run_deck_test.py")
    assert "num_layers" not in pasted.config.values
    assert any("deck-test-7L" in p and "--miles-root" in p for p in pasted.problems)
