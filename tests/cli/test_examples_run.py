"""Every example command line (README.md, docs/, each command's --help) either runs here and
does what its text says, or is listed in NOT_HERE with what it needs. A new example that is
neither fails test_every_example_is_run_or_says_why (test_docs_commands.py checks that each
names real commands and options)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from ppodeck.app.cli.root import app
from ppodeck.engine.run.rundir import RunDir, write_status
from tests.cli.test_docs_commands import PAGES, _shown_commands
from tests.fixtures.make_samples import write_run

# Not run by this test, and why: (regex on the example, what it needs).
NOT_HERE: list[tuple[str, str]] = [
    (r"^ppodeck$|^ppodeck tui", "a terminal: the TUI (tests/tui/test_pty_keys.py)"),
    (r"\b(RUN|RUN_A|DIR|FILE|PRESET|SEARCH|HEAD)\b|\[|\|", "a placeholder: a syntax summary"),
    (r"--submit|ray-address", "a Ray cluster"),
    (r"--engine miles --miles-root|--miles-root|from-command|run-glm5|--from-command",
     "a miles checkout or its launch scripts"),
    (r"^ppodeck prepare", "a network (downloads checkpoints and data)"),
    (r"qwen3-4b-ppo --engine miles$|sglang|^ppodeck run qwen3", "a GPU"),
    (r"^ppodeck run( |$)", "a full run: minutes on CPU (tests/engine runs tiny-cpu end to end)"),
    (r"^ppodeck canary", "a canary run: minutes on CPU (tests/engine/test_canary.py runs it)"),
    (r"^ppodeck runs saves", "a run's or a miles run's saves at that path "
     "(tests/health/test_verified_saves.py checks real tiny-cpu saves)"),
    (r"^ppodeck (attach|stop|tail|health|compare|plot|runs add)( |$)",
     "a live or recorded run of that id (tests/cli, tests/runs use fixtures)"),
    (r"presets import", "a teammate's preset file at that path"),
    (r"^ppodeck (command|validate|samples)$|^ppodeck validate --engine( miles)?$",
     "its argument: a usage line"),
]


def _help_examples(node: object, out: list[str]) -> None:
    in_example = False
    for line in (getattr(node, "help", None) or "").splitlines():
        if line.strip() == "Example:":
            in_example = True
        elif in_example and line.strip().startswith("ppodeck"):
            out.append(line.strip())
    for sub in getattr(node, "commands", {}).values():
        _help_examples(sub, out)


def all_examples() -> list[str]:
    found: list[str] = []
    _help_examples(typer.main.get_command(app), found)
    for page in PAGES:
        found += _shown_commands(page.read_text(encoding="utf-8"))
    return sorted({" ".join(example.split()) for example in found})


def not_here(example: str) -> str | None:
    return next((why for pattern, why in NOT_HERE if re.search(pattern, example)), None)


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("config", "state", "runs"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("PPODECK_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("PPODECK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("PPODECK_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("PPODECK_PRESET_PATH", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(example: str) -> tuple[int, str, str]:
    words = shlex.split(example.split(" | ")[0])  # `| jq ...` is the reader's own
    result = CliRunner().invoke(app, words[1:])
    assert not isinstance(result.exception, (AttributeError, TypeError, KeyError)), \
        f"`{example}` crashed: {result.exception!r}"
    return result.exit_code, result.stdout, result.stderr


def test_every_example_is_run_or_says_why() -> None:
    unplaced = [e for e in all_examples() if not_here(e) is None and e not in RUN_HERE]
    assert not unplaced, f"examples neither run here nor marked in NOT_HERE: {unplaced}"


# Examples that run here, each with what its text claims, checked on the output.
RUN_HERE: dict[str, str] = {
    "ppodeck --version": "exit 0",
    "ppodeck command qwen3-4b-ppo": "the argv after `python3 train.py`",
    "ppodeck command qwen3-4b-ppo --set num-rollout=3 --json": "JSON argv",
    "ppodeck command qwen3-4b-ppo --engine miles": "exit 0",
    "ppodeck flags": "exit 0",
    "ppodeck flags --json kl": "JSON",
    "ppodeck flags --markdown": "exit 0",
    "ppodeck flags refused": "exit 0",
    "ppodeck presets ls": "exit 0",
    "ppodeck presets ls --json": "JSON",
    "ppodeck presets show qwen3-4b-ppo": "exit 0",
    "ppodeck presets show qwen3-4b-ppo-ci --resolved": "exit 0",
    "ppodeck presets diff qwen3-4b-ppo qwen3-4b-ppo-ci": "exit 0",
    "ppodeck presets export qwen3-4b-ppo-ci -o ci.toml": "writes ci.toml",
    "ppodeck presets new my-ppo --from qwen3-4b-ppo --set num-rollout=50": "writes the file",
    "ppodeck presets new my-run --from tiny-cpu --set eps-clip=0.25": "a valid preset",
    "ppodeck runs ls": "exit 0",
    "ppodeck validate tiny-cpu --set eps-clip=0.25 --json": "valid, as JSON",
    "ppodeck validate qwen3-4b-ppo": "a report, exit 0 or 1 with its verdict",
    "ppodeck validate qwen3-4b-ppo --json": "JSON report",
    "ppodeck validate qwen3-4b-ppo --engine miles": "a report",
    "ppodeck validate tiny-cpu --engine miles": "preset.engines: tiny-cpu runs on ppodeck only",
    "ppodeck validate qwen3-0.6b-ppo-1gpu --set rollout-backend=hf --json": "JSON report",
    "ppodeck validate qwen3-0.6b-ppo-1gpu --set rollout-backend=hf --set num-rollout=12 --json":
        "JSON report",
    "ppodeck samples 260101-000000-tiny-cpu-abcd": "the latest rollout's samples",
    "ppodeck samples 260101-000000-tiny-cpu-abcd --rollout 3 --sort advantage": "rollout 3",
    "ppodeck samples 260101-000000-tiny-cpu-abcd -r 3 --json | jq '.[0].advantages'": "JSON",
}


@pytest.mark.parametrize("example", sorted(RUN_HERE))
def test_example_runs_and_does_what_it_says(example: str, cli_env: Path) -> None:
    if example.startswith("ppodeck samples"):  # the run its text names
        run = RunDir(cli_env / "runs" / "260101-000000-tiny-cpu-abcd")
        run.path.mkdir()
        write_status(run, state="succeeded", preset="tiny-cpu")
        write_run(run.path, rollouts=4)
    code, out, err = invoke(example)
    assert example in all_examples(), f"{example} is no longer an example: drop it here"
    # a GPU preset's verdict depends on the machine (check() judges it): 0 OK, 1 INVALID
    verdicts = (0, 1) if example.startswith("ppodeck validate qwen3") else (0,)
    if example == "ppodeck validate tiny-cpu --engine miles":  # docs/presets.md: refused
        assert code == 1 and "preset.engines" in out and "runs on ppodeck only" in out
        return
    assert code in verdicts, f"`{example}` exited {code}:\n{out}\n{err}"
    if "--json" in example:
        data = json.loads(out)
        if example.startswith("ppodeck validate"):
            assert data["ok"] is (code == 0)
    if example == "ppodeck command qwen3-4b-ppo":
        assert out.startswith("--actor-num-nodes ")  # README: what follows python3 train.py
    if example.startswith("ppodeck presets new my-run"):
        assert "INVALID" not in err and (cli_env / "config" / "presets" / "my-run.toml").is_file()
    if "-o ci.toml" in example:
        assert (cli_env / "ci.toml").is_file()
    if example.startswith("ppodeck validate tiny-cpu"):
        assert json.loads(out)["ok"] is True
    if "--rollout 3 --sort advantage" in example:
        rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
        assert rows and all(row[0] == "3" for row in rows)  # rollout 3's samples
        advantages = [float(row[3]) for row in rows]
        assert advantages == sorted(advantages, reverse=True)
