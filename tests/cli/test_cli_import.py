"""`presets from-command` and `validate --from-command` on a launch script given as a path."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ppodeck.app.cli import app

runner = CliRunner()

SCRIPT = """#!/bin/bash
set -ex
MODEL_ARGS_LINE="$(python3 "${MILES}/miles/utils/external_utils/model_args_utils.py" \\
  "qwen3-0.6B")" || exit 1
read -ra MODEL_ARGS <<< "${MODEL_ARGS_LINE}"
source "$(dirname "${BASH_SOURCE[0]}")/ckpt.sh"
ray job submit --runtime-env-json="{
  \\"env_vars\\": {\\"CUDA_DEVICE_MAX_CONNECTIONS\\": \\"1\\"}
}" -- python3 train.py --num-rollout 3 ${MODEL_ARGS[@]} ${CKPT_ARGS[@]} --save "$OUT"
"""


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PPODECK_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("PPODECK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PPODECK_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.delenv("OUT", raising=False)
    return tmp_path


def write_script(tmp_path: Path) -> Path:
    (tmp_path / "ckpt.sh").write_text("CKPT_ARGS=(\n  --hf-checkpoint /models/Qwen3-0.6B\n)\n")
    script = tmp_path / "run-qwen3-0.6B.sh"
    script.write_text(SCRIPT)
    return script


def test_from_command_keeps_each_flags_script_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["presets", "from-command", str(write_script(tmp_path)),
                                 "--name", "imported"])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "num-rollout = 3 # run-qwen3-0.6B.sh:9" in out
    assert "num-layers = 28 # run-qwen3-0.6B.sh:3 via qwen3-0.6B: built-in table" in out
    assert 'hf-checkpoint = "/models/Qwen3-0.6B" # ckpt.sh:2 via $CKPT_ARGS' in out
    err = result.stderr
    assert "import report: run-qwen3-0.6B.sh (train command at line 7)" in err
    assert "model qwen3-0.6B" in err and "$OUT (run-qwen3-0.6B.sh:9): OUT is not defined" in err
    assert "command.syntax_error" not in err and "Traceback" not in err


def test_validate_from_a_script_has_the_model_shape(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", "--from-command", str(write_script(tmp_path)),
                                 "--json"])
    assert "model.shape_required" not in result.stdout
    assert "command.unresolved_variable" in result.stdout


LAUNCHERS = Path(__file__).parents[1] / "config" / "launchers"


def test_from_command_reads_a_python_launcher_with_its_own_options() -> None:
    launcher = LAUNCHERS / "post_init.py"
    result = runner.invoke(app, ["presets", "from-command", str(launcher), "--name", "small",
                                 "--launcher-args", "--model-name Qwen3-0.6B"])
    assert result.exit_code == 0, result.output
    assert "import report: post_init.py (read as a Python launcher" in result.stderr
    assert "imported from a miles Python launcher" in result.stdout
    lines = {line.split(" = ")[0]: line for line in result.stdout.splitlines() if " = " in line}
    assert lines["tensor-model-parallel-size"].startswith("tensor-model-parallel-size = 1 # ")
    assert lines["hidden-size"].startswith("hidden-size = 1024 # qwen3-0.6B (post_init.py:")


def test_from_command_writes_prepare_downloads_as_sources(tmp_path: Path) -> None:
    result = runner.invoke(app, ["presets", "from-command", str(LAUNCHERS / "prepare_steps.py"),
                                 "--name", "prep", "--save"])
    assert result.exit_code == 0, result.output
    from ppodeck.engine.launch.prepare import preset_sources
    from ppodeck.engine.presets import load_preset

    sources = preset_sources(load_preset("prep"))
    assert {d: s.repo_id for d, s in sources.items()} == {
        "hf_checkpoint": "Qwen/Qwen3-0.6B", "prompt_data": "someone/gsm8k-mini"}


def test_validate_a_python_launcher_and_refuse_a_bad_launcher_option() -> None:
    seed = str(LAUNCHERS / "seed_ppo.py")
    import json

    result = runner.invoke(app, ["validate", "--from-command", seed, "--json"])
    preset = runner.invoke(app, ["validate", "qwen3-4b-ppo", "--json"])
    assert result.exit_code == preset.exit_code  # both judged against this machine the same
    derived = json.loads(result.stdout)["derived"]
    expected = json.loads(preset.stdout)["derived"]
    keys = ("world_size", "dp_size", "rollout_engines", "samples_per_rollout",
            "actor_steps_per_rollout", "critic_steps_per_rollout", "total_train_iters", "params")
    assert {k: derived[k] for k in keys} == {k: expected[k] for k in keys}
    bad = runner.invoke(app, ["validate", "--from-command", seed,
                              "--launcher-args", "--num-gpus-per-node four"])
    assert bad.exit_code == 2
    assert "--num-gpus-per-node 'four': expected int" in bad.stderr
    assert "Traceback" not in bad.output


RECORDED = '''
from dataclasses import dataclass

import miles.utils.external_utils.command_utils as U


@dataclass
class ScriptArgs(U.ExecuteTrainConfig):
    marker: str = "unset"
    rollouts: int = 3


@U.dataclass_cli
def main(args: ScriptArgs):
    U.exec_command_cpu(f"touch {args.marker}")
    U.exec_command_cpu("hf download Qwen/Qwen3-0.6B --local-dir /m/Qwen3-0.6B")
    flags = "--num-rollout %d" % args.rollouts  # %-formatting: static reading stops here
    U.execute_train(train_args=f"{flags} --hf-checkpoint /m/Qwen3-0.6B --train-backend fsdp",
                    num_gpus_per_node=1, megatron_model_type=None)
'''


def test_run_launcher_needs_consent_and_records_instead_of_running(tmp_path: Path) -> None:
    launcher = tmp_path / "run_gen.py"
    launcher.write_text(RECORDED)
    marker = tmp_path / "marker"
    options = ["presets", "from-command", str(launcher), "--launcher-args",
               f"--marker {marker} --rollouts 7"]
    static = runner.invoke(app, options)
    assert "--run-launcher to run it with miles' helpers replaced by recorders" in " ".join(
        static.stderr.split())
    refused = runner.invoke(app, [*options, "--run-launcher"])
    assert refused.exit_code == 2 and "refusing to run a launcher" in refused.stderr
    ran = runner.invoke(app, [*options, "--run-launcher", "--trust"])
    assert ran.exit_code == 0, ran.output
    assert "num-rollout = 7 # run_gen.py:18" in ran.stdout  # the execute_train call's line
    assert 'hf-checkpoint = "Qwen/Qwen3-0.6B"' in ran.stdout  # its download, as a source
    assert "run with miles' helpers replaced by recorders" in ran.stderr
    assert f"not done by ppodeck prepare: touch {marker}" in ran.stderr
    assert not marker.exists()  # recorded, never run


@pytest.mark.parametrize("text", ["echo hi\n", "", "hf download Qwen/Qwen3-0.6B --local-dir m\n"],
                         ids=["echo", "empty", "download only"])
def test_text_with_no_train_command_is_one_error(tmp_path: Path, text: str) -> None:
    script = tmp_path / "notes.sh"
    script.write_text(text)
    result = runner.invoke(app, ["validate", "--from-command", str(script)])
    assert result.exit_code == 1, result.output
    assert "notes.sh: INVALID (1 error, 0 warnings, 1 info)" in result.stdout
    assert "command.no_train_command" in result.stdout and "argv.stray_token" not in result.stdout


@pytest.mark.parametrize("text", ["echo hi\n", "import os\n" + "x = 1\n" * 3])
def test_from_command_writes_no_preset_from_what_it_could_not_read(tmp_path: Path,
                                                                   text: str) -> None:
    script = tmp_path / ("notes.sh" if text.startswith("echo") else "run_x.py")
    script.write_text(text)
    result = runner.invoke(app, ["presets", "from-command", str(script), "--save",
                                 "--name", "nothing"])
    assert result.exit_code == 1, result.output
    assert f"no preset written: {script} could not be read" in result.stderr
    assert result.stdout == "" and not (tmp_path / "config").exists()


def test_a_launcher_whose_ray_has_fewer_gpus_than_its_command_asks_says_so(
        tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", "--from-command",
                                 str(LAUNCHERS / "fstrings_concat.py")])
    out = " ".join(result.stdout.split())
    assert "launcher.ray_gpus_short" in out
    assert ("starts Ray with 1 GPU per node, but the command asks each node for 8 "
            "(--actor-num-gpus-per-node, miles' default)") in out
    launcher = tmp_path / "run_x.py"
    launcher.write_text((LAUNCHERS / "fstrings_concat.py").read_text().replace(
        "num_gpus_per_node=1, ", ""))
    result = runner.invoke(app, ["presets", "from-command", str(launcher)])
    assert "ray cluster: no GPUs per node" in result.stderr
    assert "launcher.num_gpus_per_node_missing" in result.stderr
