"""`--engine miles` without Ray: the argv train.py gets, the job's environment, the checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ppodeck.app.cli.root import app
from ppodeck.engine.config import to_argv
from ppodeck.engine.miles.drive import (
    MilesLaunchError,
    check_miles_root,
    dump_dir,
    miles_argv,
    runtime_env_vars,
    secret_job_env,
)
from ppodeck.engine.presets import load_preset, resolve_preset
from ppodeck.engine.run.rundir import RunDir

STANDIN = Path(__file__).resolve().parents[1] / "miles_standin"


def tiny(**values):
    return resolve_preset(load_preset("tiny-cpu")).with_values(**values)


def test_the_argv_is_ppodeck_command_without_own_flags_plus_the_dump(tmp_path) -> None:
    rundir = RunDir(tmp_path / "run")
    config = tiny(wandb_key="s3cret-key")
    argv, added, dropped = miles_argv(config, rundir)
    assert dropped == ["--rollout-backend", "--synthetic-task", "--synthetic-num-prompts",
                       "--model-init", "--max-prompt-len"]
    assert added == ["--dump-details", str(rundir.path.resolve() / "miles"),
                     "--use-miles-dashboard"]
    shown = to_argv(config.with_values(**{d: None for d in ("rollout_backend", "synthetic_task",
                    "synthetic_num_prompts", "model_init", "max_prompt_len", "wandb_key")}),
                    expand_paths=True)
    assert argv == shown + added
    assert "s3cret-key" not in " ".join(argv)
    assert secret_job_env(config) == {"WANDB_API_KEY": "s3cret-key"}
    assert dump_dir(config, rundir) == rundir.path.resolve() / "miles"


def test_command_engine_miles_prints_what_the_run_hands_train_py(tmp_path) -> None:
    """`ppodeck command --engine miles` is the launched argv without the watch flags the run
    adds, and says on stderr what it left out and what the run adds."""
    import json
    import shlex

    shown = CliRunner().invoke(app, ["command", "tiny-cpu", "--engine", "miles", "--json"])
    assert shown.exit_code == 0, shown.output
    argv, added, dropped = miles_argv(tiny(), RunDir(tmp_path / "run"))
    assert json.loads(shown.stdout) == argv[:len(argv) - len(added)]
    assert "left out for miles" in shown.stderr and " ".join(dropped) in shown.stderr
    assert "--dump-details" in shown.stderr
    plain = CliRunner().invoke(app, ["command", "tiny-cpu"])
    assert "--rollout-backend" in shlex.split(plain.stdout)  # PPO Deck's own flags stay there


def test_a_preset_that_sets_the_dump_keeps_it(tmp_path) -> None:
    rundir = RunDir(tmp_path / "run")
    config = tiny(dump_details=str(tmp_path / "mine"), use_miles_dashboard=True)
    argv, added, _ = miles_argv(config, rundir)
    assert added == [] and argv[argv.index("--dump-details") + 1] == str(tmp_path / "mine")
    assert dump_dir(config, rundir) == (tmp_path / "mine").resolve()


def test_the_job_environment_is_miles_launchers(tmp_path) -> None:
    (tmp_path / "miles").mkdir()
    (tmp_path / "Megatron-LM").mkdir()
    env = runtime_env_vars(tmp_path / "miles", tiny(), {"PYTHONPATH": "/x", "NCCL_DEBUG": "INFO",
                                                        "MASTER_ADDR": "10.0.0.1"}, True)
    assert env == {"PYTHONUNBUFFERED": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
                   "NCCL_NVLS_ENABLE": "1", "NCCL_DEBUG": "INFO",
                   "no_proxy": "127.0.0.1,10.0.0.1", "MASTER_ADDR": "10.0.0.1",
                   "PYTHONPATH": f"{tmp_path / 'miles'}:{tmp_path / 'Megatron-LM'}:/x"}
    fsdp = runtime_env_vars(tmp_path / "miles", tiny(train_backend="fsdp"),
                            {"PPODECK_MEGATRON_PATH": "/m", "NCCL_NVLS_ENABLE": "0"}, True)
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in fsdp and fsdp["NCCL_NVLS_ENABLE"] == "0"
    assert fsdp["PYTHONPATH"] == f"{tmp_path / 'miles'}:/m"


def test_run_engine_miles_refuses_what_cannot_start(tmp_path, runs_dir) -> None:
    with pytest.raises(MilesLaunchError, match="no train.py there"):
        check_miles_root(tmp_path)
    runner = CliRunner()
    no_root = runner.invoke(app, ["run", "tiny-cpu", "--engine", "miles"])
    assert no_root.exit_code == 2 and "--miles-root" in no_root.stderr
    bad = runner.invoke(app, ["run", "tiny-cpu", "--engine", "nope"])
    assert bad.exit_code == 2 and "unknown engine" in bad.stderr
    from ppodeck.engine.config.rules_engine import this_machine

    if this_machine().gpus == 0:  # a CPU machine: miles cannot run here, nothing is created
        no_gpus = runner.invoke(app, ["run", "tiny-cpu", "--engine", "miles", "--miles-root",
                                      str(STANDIN)], env={"PPODECK_TEST_RAY_GPUS": "0"})
        assert no_gpus.exit_code == 1 and "miles.gpus_missing" in no_gpus.stderr
        assert not list(runs_dir.glob("*"))
    resumed = runner.invoke(app, ["run", "--resume", "x", "--engine", "miles"])
    assert resumed.exit_code == 2 and "miles resumes from --load" in resumed.stderr


def test_the_tui_launch_refuses_what_miles_would(tmp_path, runs_dir) -> None:
    from ppodeck.engine.miles.drive import launch

    with pytest.raises(MilesLaunchError, match="miles.ref_load_missing"):
        launch(tiny(advantage_estimator="grpo", kl_coef=0.1), "tiny-cpu", STANDIN,
               "http://cluster:8265")  # a cluster: its GPUs are not this machine's
    assert not list(runs_dir.glob("*"))
