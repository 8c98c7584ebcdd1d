"""A shared preset naming a reward function (--custom-rm-path, now run by the engine) runs it only
with consent (--trust), and the launched driver is told where the launch directory is."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ppodeck.app.cli import app as ppodeck
from ppodeck.engine.run.rundir import RunDir, read_status
from tests.reliability import helpers

RUNNER = CliRunner()
FAKE = {"PPODECK_DRIVER_MODULE": "tests.runs.fake_driver", "FAKE_DRIVER_MODE": "succeed"}


@pytest.fixture
def shared_preset(runs_dir: Path, isolated_config: Path, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> Path:
    for key, value in FAKE.items():
        monkeypatch.setenv(key, value)
    code = tmp_path / "launch"
    code.mkdir()
    (code / "team_rm.py").write_text("async def score(args, sample, **kwargs):\n    return 1.0\n")
    monkeypatch.chdir(code)  # `ppodeck run` from the directory holding the reward module
    monkeypatch.delenv("PPODECK_CODE_DIR", raising=False)
    return helpers.write_preset(tmp_path / "team.toml",
                                'custom-rm-path = "team_rm.score"\n'
                                'dynamic-sampling-filter-path = "miles.rollout.filter_hub.'
                                'dynamic_sampling_filters.check_reward_nonzero_std"\n')


def test_a_reward_function_in_a_shared_preset_needs_trust(shared_preset: Path,
                                                          runs_dir: Path) -> None:
    result = RUNNER.invoke(ppodeck, ["run", str(shared_preset), "--detach", "--yes"])
    assert result.exit_code == 1, result.output
    assert "--custom-rm-path" in result.stderr and "team_rm.score" in result.stderr
    assert "--dynamic-sampling-filter-path" in result.stderr and "--trust" in result.stderr
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


def test_with_trust_it_launches(shared_preset: Path, runs_dir: Path,
                                started: list[int]) -> None:
    result = RUNNER.invoke(ppodeck, ["run", str(shared_preset), "--detach", "--yes", "--trust"])
    assert result.exit_code == 0, result.output
    rundir = RunDir(runs_dir / result.stdout.strip())
    started.append(read_status(rundir)["pid"])
    helpers.wait_until(lambda: read_status(rundir)["state"] == "succeeded", 20, "the run")


def test_the_driver_is_told_the_launch_directory(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver runs from the repository: the launch directory, where `--custom-rm-path
    team_rm.score` was found by check(), reaches it (and its Ray workers) in PPODECK_CODE_DIR."""
    from ppodeck.engine.launch import local as launch

    seen: dict[str, str] = {}

    class Recorded:
        pid = 4242

        def __init__(self, argv: list[str], env: dict[str, str], **kwargs: object) -> None:
            seen.update(env)

    monkeypatch.setattr(launch.subprocess, "Popen", Recorded)
    monkeypatch.delenv("PPODECK_CODE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    rundir = RunDir(tmp_path / "run")
    rundir.path.mkdir()
    launch.start_driver(rundir)
    assert seen["PPODECK_CODE_DIR"] == str(tmp_path)
