"""The config side of the CLI: validate, command, presets *, tui, and the error wrapper."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ppodeck.app.cli.config as cli_config
import ppodeck.app.cli.root as cli
from ppodeck.app.cli import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PPODECK_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("PPODECK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PPODECK_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.delenv("PPODECK_PRESET_PATH", raising=False)
    return tmp_path


def run(*args: str, input: str | None = None):
    return runner.invoke(app, list(args), input=input)


def codes(result) -> set[str]:
    return {i["code"] for i in json.loads(result.stdout)["issues"]}


# --- validate ----------------------------------------------------------------------------------

def test_validate_seed_runs_its_context_parallelism() -> None:
    """On a CPU host (the tests' 24 GiB one) the seed's CPU ranks do not fit: refused, naming
    the GiB (#43); its CP split is still explained."""
    result = run("validate", "qwen3-4b-ppo")
    assert result.exit_code == 1, result.output
    assert result.stdout.startswith("qwen3-4b-ppo: INVALID (1 error, ")
    assert "engine.host_memory_cpu" in result.stdout and "GiB of host memory" in result.stdout
    assert "24 GiB of RAM (22 GiB usable beside the OS)" in result.stdout
    assert "engine.context_parallel" in result.stdout  # how CP2 splits the rows
    assert "cut in 4 chunks" in result.stdout
    assert "world size 4 CPU rank(s) · DP 1" in result.stdout


def test_validate_json_shape() -> None:
    result = run("validate", "tiny-cpu", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert set(data) == {"ok", "issues", "derived"} and data["ok"] is True
    assert set(data["issues"][0]) == {"level", "code", "flags", "message", "fix"}
    assert data["derived"]["world_size"] == 1
    assert data["derived"]["memory_gib"] == {} and data["derived"]["gpus_needed"] is None
    assert {"actor", "critic", "rollout", "processes", "total"} <= set(
        data["derived"]["host_memory_gib"])  # a CPU run: host memory, no GPU figures


@pytest.mark.parametrize("item", ["kl-coef=0.1", "--kl-coef=0.1", "kl_coef=0.1"])
def test_validate_set_error_exit_1(item: str) -> None:
    result = run("validate", "tiny-cpu", "--set", item, "--json")
    assert result.exit_code == 1
    assert "ppo.kl_coef_nonzero" in codes(result)
    assert json.loads(result.stdout)["ok"] is False


@pytest.mark.parametrize("item", ["no-offload-train", "offload-train=false", "--no-offload-train",
                                  "offload-train=off"])
def test_validate_set_tristate_forms(item: str) -> None:
    result = run("validate", "tiny-cpu", "--set", item, "--json")
    assert result.exit_code == 0
    assert "ppo.no_offload_train" in codes(result)


def test_validate_set_bool_false_unsets() -> None:
    result = run("validate", "tiny-cpu", "-s", "colocate=false", "--json")
    assert "rollout.num_gpus_required" in codes(result) and result.exit_code == 1


def test_validate_set_bad_value_names_flag() -> None:
    result = run("validate", "tiny-cpu", "--set", "lr=abc")
    assert result.exit_code == 1
    assert "--lr expects a number, got 'abc'" in result.stdout


@pytest.mark.parametrize(("item", "needle"), [("kl-coeff=0.1", "Did you mean kl-coef?"),
                                              ("=3", "FLAG=VALUE"), ("lr", "expects a value")])
def test_validate_set_usage_errors(item: str, needle: str) -> None:
    result = run("validate", "tiny-cpu", "--set", item)
    assert result.exit_code == 2
    assert needle in result.stderr and "Traceback" not in result.output


def test_validate_unknown_preset_exit_2() -> None:
    result = run("validate", "qwen3-4b-pp")
    assert result.exit_code == 2
    assert "unknown preset 'qwen3-4b-pp'" in result.stderr
    assert "did you mean 'qwen3-4b-ppo'" in result.stderr
    assert result.stdout == ""


def test_validate_nothing_is_usage() -> None:
    assert run("validate").exit_code == 2


def test_validate_malformed_toml_names_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("schema_version = 1\n[flags]\nlr = = 1\n")
    result = run("validate", str(bad))
    assert result.exit_code == 1
    assert str(bad) in result.stderr and "line 3" in result.stderr
    assert "Fix:" in result.stderr and "Traceback" not in result.output


def test_validate_wrong_type_names_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[flags]\ncolocate = 3\n")
    result = run("validate", str(bad))
    assert result.exit_code == 1 and f"{bad}:2" in result.stderr and "--colocate" in result.stderr


def test_validate_unreadable_file(tmp_path: Path) -> None:
    result = run("validate", "--from-command", str(tmp_path / "missing.sh"))
    assert result.exit_code == 2 and "missing.sh" in result.stderr and "Fix:" in result.stderr


def test_validate_from_command_stdin() -> None:
    text = "python3 train.py --advantage-estimator ppo --kl-coef 0.1 --kl-coeff 2"
    result = run("validate", "tiny-cpu", "--from-command", "-", "--json", input=text)
    assert result.exit_code == 1
    found = codes(result)
    assert {"ppo.kl_coef_nonzero", "argv.unknown_flag", "engine.passthrough_ignored"} <= found


# --- command -----------------------------------------------------------------------------------

def test_command_prints_argv(isolated_env: Path) -> None:
    result = run("command", "qwen3-4b-ppo")
    assert result.exit_code == 0
    line = result.stdout.strip()
    assert "--advantage-estimator ppo" in line and "--colocate" in line
    assert str(isolated_env / "home" / "models" / "Qwen3-4B") in line
    raw = run("command", "qwen3-4b-ppo", "--raw-paths", "--json")
    assert "${PPODECK_HOME}/models/Qwen3-4B" in json.loads(raw.stdout)


def test_command_masks_secrets() -> None:
    masked = run("command", "tiny-cpu", "--set", "wandb-key=s3cret")
    assert "s3cret" not in masked.stdout and "********" in masked.stdout
    shown = run("command", "tiny-cpu", "--set", "wandb-key=s3cret", "--show-secrets")
    assert "s3cret" in shown.stdout


def test_command_invalid_config_exit_1() -> None:
    result = run("command", "tiny-cpu", "--set", "kl-coef=0.5")
    assert result.exit_code == 1 and "--kl-coef 0.5" in result.stdout
    assert "ppodeck validate tiny-cpu" in result.stderr


# --- presets -----------------------------------------------------------------------------------

def test_presets_ls_and_json() -> None:
    result = run("presets", "ls")
    assert result.exit_code == 0 and "qwen3-4b-ppo" in result.stdout
    data = json.loads(run("presets", "ls", "--json").stdout)
    names = {p["name"]: p for p in data}
    assert names["tiny-cpu"]["source"] == "built-in"


def test_presets_ls_shows_shadowing(isolated_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    team = isolated_env / "team"
    team.mkdir()
    (team / "tiny-cpu.toml").write_text("[flags]\n")
    monkeypatch.setenv("PPODECK_PRESET_PATH", str(team))
    result = run("presets", "ls")
    assert f"wins over {team / 'tiny-cpu.toml'}" in result.stdout


def test_presets_show_file_resolved_and_json() -> None:
    assert "extends = \"qwen3-4b-ppo\"" in run("presets", "show", "qwen3-4b-ppo-ci").stdout
    resolved = run("presets", "show", "qwen3-4b-ppo-ci", "--resolved").stdout
    assert "num-layers = 36" in resolved and "extends" not in resolved.split("[flags]")[0]
    data = json.loads(run("presets", "show", "qwen3-4b-ppo-ci", "--json", "--resolved").stdout)
    assert data["flags"]["eps-clip"] == 4e-4 and data["resolved"]["num-layers"] == 36


def test_presets_diff() -> None:
    result = run("presets", "diff", "qwen3-4b-ppo", "qwen3-4b-ppo-ci")
    assert result.exit_code == 0 and "--eps-clip: 0.2 -> 0.0004" in result.stdout
    data = json.loads(run("presets", "diff", "qwen3-4b-ppo", "qwen3-4b-ppo-ci", "--json").stdout)
    assert {"flag": "--num-rollout", "a": 300, "b": 3} in data


def test_presets_export_import_roundtrip(isolated_env: Path) -> None:
    out = isolated_env / "ci.toml"
    assert run("presets", "export", "qwen3-4b-ppo-ci", "-o", str(out)).exit_code == 0
    assert run("presets", "export", "qwen3-4b-ppo-ci", "-o", str(out)).exit_code == 2
    first = run("presets", "import", str(out), "--name", "my-ci")
    assert first.exit_code == 0, first.output
    assert (isolated_env / "config" / "presets" / "my-ci.toml").is_file()
    again = run("presets", "import", str(out), "--name", "my-ci")
    assert again.exit_code == 1 and "--force" in again.stderr
    assert run("presets", "import", str(out), "--name", "my-ci", "--force").exit_code == 0
    assert run("presets", "diff", "my-ci", "qwen3-4b-ppo-ci").stdout.startswith(
        "my-ci and qwen3-4b-ppo-ci resolve to the same flags")


def test_presets_import_refuses_invalid(isolated_env: Path) -> None:
    src = isolated_env / "bad.toml"
    src.write_text('name = "bad"\n[flags]\nadvantage-estimator = "ppo"\nkl-coef = 0.2\n')
    result = run("presets", "import", str(src))
    assert result.exit_code == 1 and "ppo.kl_coef_nonzero" in result.stderr


def test_presets_new(isolated_env: Path) -> None:
    result = run("presets", "new", "mine", "--from", "tiny-cpu", "--set", "num-rollout=5")
    assert result.exit_code == 0, result.output
    text = (isolated_env / "config" / "presets" / "mine.toml").read_text()
    assert 'extends = "tiny-cpu"' in text and "num-rollout = 5" in text
    assert "ppodeck run mine" in text
    check = run("validate", "mine", "--json")
    assert check.exit_code == 0
    assert run("presets", "new", "mine").exit_code == 2


def test_presets_from_command(isolated_env: Path) -> None:
    text = ("ray job submit -- python3 train.py \\\n --advantage-estimator ppo --lr $LR "
            "--num-rollout 3\n")
    result = run("presets", "from-command", "-", "--name", "pasted", input=text)
    assert result.exit_code == 0
    assert 'advantage-estimator = "ppo"' in result.stdout and 'lr = "$LR"' in result.stdout
    assert "FIX BEFORE USE" in result.stdout and "$LR" in result.stderr
    saved = run("presets", "from-command", "-", "--name", "pasted", "--save",
                input="python3 train.py --num-rollout 3")
    assert saved.exit_code == 0
    assert (isolated_env / "config" / "presets" / "pasted.toml").is_file()


# --- tui and the crash wrapper -----------------------------------------------------------------

def test_bare_ppodeck_opens_tui(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict] = []
    fake = types.ModuleType("ppodeck.app.tui.app")
    fake.__spec__ = ModuleSpec("ppodeck.app.tui.app", None)
    fake.run_tui = lambda **kw: calls.append(kw)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ppodeck.app.tui.app", fake)
    assert run().exit_code == 0
    assert run("tui", "tiny-cpu").exit_code == 0
    assert calls == [{}, {"preset": "tiny-cpu"}]


def test_tui_missing_is_a_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ppodeck.app.tui.app", None)  # importing it raises ImportError
    result = run("tui")
    assert result.exit_code == 1 and "TUI is not available" in result.stderr


def test_main_turns_crashes_into_one_line(isolated_env: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    def boom(config, **options):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(cli_config, "check", boom)
    monkeypatch.setattr(sys, "argv", ["ppodeck", "validate", "tiny-cpu"])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    log = isolated_env / "logs" / "cli-errors.log"
    assert err.strip() == f"ppodeck: unexpected error: RuntimeError: kaboom (details in {log})"
    assert "Traceback" in log.read_text()


def test_crash_log_masks_secrets_and_is_private(isolated_env: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    key = "wk-0123456789abcdef"

    def boom(config):
        raise RuntimeError(f"upload refused for key {key}")

    monkeypatch.setattr(cli_config, "check", boom)
    monkeypatch.setattr(sys, "argv", ["ppodeck", "validate", "tiny-cpu", "--set",
                                      f"wandb-key={key}", "-s", f"--wandb_key={key}"])
    with pytest.raises(SystemExit):
        cli.main()
    log = isolated_env / "logs" / "cli-errors.log"
    text = log.read_text()
    assert key not in text and "wandb-key=<redacted>" in text and "Traceback" in text
    assert log.stat().st_mode & 0o077 == 0  # the user's alone


def test_subprocess_help_and_usage_error(isolated_env: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "PPODECK_CONFIG_DIR": str(isolated_env / "c"),
           "HOME": str(isolated_env)}
    helped = subprocess.run([sys.executable, "-m", "ppodeck", "--help"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "validate" in helped.stdout
    assert "PPODECK_PRESET_PATH" in helped.stdout
    bad = subprocess.run([sys.executable, "-m", "ppodeck", "validate", "nope"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "unknown preset 'nope'" in bad.stderr


@pytest.mark.parametrize("command", ["validate", "command", "tui"])
def test_help_has_examples(command: str) -> None:
    result = run(command, "--help")
    assert "Example:" in result.stdout and "ppodeck " in result.stdout


@pytest.mark.parametrize("command", ["ls", "show", "diff", "export", "import", "new",
                                     "from-command"])
def test_presets_help_has_examples(command: str) -> None:
    assert "Example:" in run("presets", command, "--help").stdout


# --- flags -------------------------------------------------------------------------------------

def test_flags_json_lists_every_flag_with_its_engine_class() -> None:
    from ppodeck.engine.config.schema import FLAGS

    result = run("flags", "--json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)["flags"]
    assert len(rows) == len(FLAGS)
    opsm = next(r for r in rows if r["name"] == "--use-opsm")
    assert {"name", "type", "default", "group", "help", "engine", "reason"} <= set(opsm)
    assert opsm["engine"] == "refused" and opsm["reason"]
    assert {r["engine"] for r in rows} == {"honoured", "refused", "command-only"}


def test_flags_search_and_no_match() -> None:
    result = run("flags", "dual-clip")
    assert result.exit_code == 0 and result.stdout.startswith("--eps-clip-c")
    missing = run("flags", "no-such-flag-anywhere")
    assert missing.exit_code == 2 and "no flag matches" in missing.stderr
