"""Bad input is refused before anything starts, and every CLI command answers bad arguments
and bad files with a message that names them, never with a traceback."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from ppodeck.app.cli import app as ppodeck
from tests.reliability import helpers

RUNNER = CliRunner()


@pytest.fixture
def env(runs_dir: Path, isolated_config: Path) -> Path:
    return runs_dir


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _bad_files(tmp: Path) -> dict[str, Path]:
    broken = tmp / "broken.toml"
    broken.write_text('schema_version = 1\nname = "broken"\n[flags]\nlr = \n')
    newer = helpers.write_preset(tmp / "newer.toml", "num-rollout = 3\n")
    newer.write_text(newer.read_text().replace("schema_version = 1", "schema_version = 99"))
    no_data = helpers.write_preset(tmp / "no-data.toml", 'prompt-data = "/nope.jsonl"\n',
                                   head='unset = ["synthetic-task"]\n')
    return {"broken": broken, "newer": newer, "no_data": no_data}


REFUSED = [  # (args after `run`, what the message must name)
    (["tiny-cpu", "--set", "hf-checkpoint=/nope"], "--hf-checkpoint /nope"),
    (["tiny-cpu", "--set", "ref-load=/nope/torch_dist"], "--ref-load /nope/torch_dist"),
    (["{no_data}"], "--prompt-data /nope.jsonl"),
    (["tiny-cpu", "--set", "lr=abc"], "--lr"),
    (["tiny-cpu", "--set", "num-rollout=ten"], "--num-rollout"),
    (["tiny-cpu", "--set", "global-batch-size=-32"], "--global-batch-size"),
    (["tiny-cpu", "--set", "rollout-batch-size=-1"], "--rollout-batch-size"),
    (["{newer}"], "newer.toml"),
    (["{broken}"], "broken.toml"),
]


@pytest.mark.parametrize(("args", "names"), REFUSED,
                         ids=[" ".join(a) for a, _ in REFUSED])
def test_run_refuses_before_starting_anything(env: Path, tmp_path: Path, args: list[str],
                                              names: str) -> None:
    files = _bad_files(tmp_path)
    args = [a.format(**files) for a in args]
    before = _children()
    result = RUNNER.invoke(ppodeck, ["run", *args, "--detach", "--yes"])
    assert result.exit_code == 1, result.output
    assert names in result.output, result.output
    assert "Traceback" not in result.output
    assert not env.exists() or not any(env.iterdir()), "a run directory was created"
    assert _children() == before, "a process was started"


def test_schema_version_99_says_to_upgrade(env: Path, tmp_path: Path) -> None:
    result = RUNNER.invoke(ppodeck, ["run", str(_bad_files(tmp_path)["newer"]), "--detach"])
    assert "99" in result.output and "newer.toml" in result.output, result.output


COMMANDS = [  # every command, with bad arguments or bad files: (args, what it must name)
    (["validate", "no-such-preset"], "no-such-preset"),
    (["validate", "tiny-cpu", "--set", "nope=1"], "--nope"),
    (["validate", "tiny-cpu", "--set", "lr"], "lr"),
    (["validate", "--from-command", "/nope.sh"], "/nope.sh"),
    (["validate", "{broken}"], "broken.toml"),
    (["validate"], "PRESET"),
    (["command", "no-such-preset"], "no-such-preset"),
    (["command", "tiny-cpu", "--set", "=3"], "FLAG=VALUE"),
    (["command", "{broken}"], "broken.toml"),
    (["run"], "PRESET"),
    (["run", "no-such-preset"], "no-such-preset"),
    (["run", "tiny-cpu", "--set", "typo-flag=1"], "--typo-flag"),
    (["run", "--resume", "no-such-run"], "no-such-run"),
    (["run", "tiny-cpu", "--resume", "some-run"], "--resume"),
    (["run", "tiny-cpu", "--run-dir", "{broken}"], "broken.toml"),
    (["tail", "no-such-run"], "no-such-run"),
    (["tail", "no-such-run", "--kind", "nope"], "--kind nope"),
    (["stop", "no-such-run"], "no-such-run"),
    (["attach", "no-such-run"], "no-such-run"),
    (["runs", "nope"], "nope"),
    (["runs", "ls", "--bogus"], "--bogus"),
    (["presets", "show", "no-such-preset"], "no-such-preset"),
    (["presets", "diff", "tiny-cpu", "no-such-preset"], "no-such-preset"),
    (["presets", "export", "no-such-preset"], "no-such-preset"),
    (["presets", "import", "/nope.toml"], "/nope.toml"),
    (["presets", "import", "{broken}"], "broken.toml"),
    (["presets", "new", "mine", "--from", "no-such-preset"], "no-such-preset"),
    (["presets", "new", "mine", "--set", "lr=abc"], "--lr"),
    (["presets", "from-command", "/nope.sh"], "/nope.sh"),
    (["prepare", "no-such-preset"], "no-such-preset"),
    (["prepare", "tiny-cpu", "--set", "nope=1"], "--nope"),
    (["no-such-command"], "no-such-command"),
    (["--no-such-option"], "--no-such-option"),
]


@pytest.mark.parametrize(("args", "names"), COMMANDS,
                         ids=[" ".join(c.values[0] if hasattr(c, "values") else c[0])
                              for c in COMMANDS])
def test_every_command_answers_bad_input_with_a_message(env: Path, tmp_path: Path,
                                                        args: list[str], names: str) -> None:
    files = _bad_files(tmp_path)
    args = [a.format(**files) for a in args]
    result = RUNNER.invoke(ppodeck, args)
    assert isinstance(result.exception, SystemExit | None), repr(result.exception)
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    assert names in result.output, result.output


def test_the_installed_entry_point_prints_one_line_for_a_bad_file(env: Path,
                                                                  tmp_path: Path) -> None:
    broken = _bad_files(tmp_path)["broken"]
    done = helpers.ppodeck(["validate", str(broken)], helpers.cli_env(env))
    assert done.returncode == 1
    assert "broken.toml" in done.stderr and "Traceback" not in done.stderr + done.stdout
