"""The user's own miles as the last gate (issue #46): a stand-in miles checkout made in tmp,
whose miles/utils/arguments.py accepts, refuses, sleeps past the bound or cannot import, judged
through engine/miles/parser_gate.py by `validate --engine miles` and `run --engine miles` (the
TUI's launch dialog: tests/tui/test_launch_miles_parser.py)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ppodeck.app.cli.root import app
from ppodeck.engine.miles.parser_gate import (
    CODE_ACCEPTS,
    CODE_REFUSES,
    CODE_SKIPPED,
    CODE_UNAVAILABLE,
    GateSetupError,
    gate_setup,
    judge,
)
from ppodeck.engine.presets import load_preset, resolve_preset

PRESET = "qwen3-4b-ppo"
ACCEPTS = "def parse_args():\n    return None\n"
REFUSES = (
    "import sys\n\n\ndef parse_args():\n"
    "    if '--rollout-batch-size' in sys.argv:\n"
    "        assert False, '--rollout-batch-size is too large for this miles'\n"
)
SLEEPS = "import time\n\n\ndef parse_args():\n    time.sleep(60)\n"
BROKEN = "import a_module_miles_needs_but_is_missing  # noqa\n\n\ndef parse_args():\n    pass\n"


def checkout(root: Path, arguments: str) -> Path:
    """A directory that looks like a miles checkout to the gate: train.py and miles' parser."""
    (root / "miles" / "utils").mkdir(parents=True)
    (root / "train.py").write_text("")
    (root / "miles" / "__init__.py").write_text("")
    (root / "miles" / "utils" / "__init__.py").write_text("")
    (root / "miles" / "utils" / "arguments.py").write_text(arguments)
    return root


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch) -> Path:
    """Verdicts are kept under $PPODECK_HOME/miles-parser-gate: a fresh one per test."""
    monkeypatch.setenv("PPODECK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PPODECK_MILES_PYTHON", sys.executable)
    monkeypatch.delenv("PPODECK_MILES_PARSER_TIMEOUT", raising=False)
    return tmp_path / "home"


def validate(root: Path, *extra: str) -> tuple[int, list[dict], str]:
    result = CliRunner().invoke(
        app, ["validate", PRESET, "--engine", "miles", "--miles-root", str(root), "--json", *extra]
    )
    issues = json.loads(result.stdout)["issues"] if result.stdout.startswith("{") else []
    gate = [i for i in issues if i["code"].startswith("miles.own_parser")]
    return result.exit_code, gate, result.stderr


def test_an_accepting_parser_is_an_info_and_its_verdict_is_kept(tmp_path, home) -> None:
    root = checkout(tmp_path / "miles", ACCEPTS)
    _, gate, stderr = validate(root)
    assert [i["code"] for i in gate] == [CODE_ACCEPTS]
    assert "miles' parser: checking…" in stderr
    assert len(list((home / "miles-parser-gate").glob("*.json"))) == 1
    _, again, _ = validate(root)
    assert "cached verdict" in again[0]["message"]


def test_a_refusal_is_an_error_quoting_miles_and_its_raise_site(tmp_path) -> None:
    root = checkout(tmp_path / "miles", REFUSES)
    code, gate, _ = validate(root)
    assert code == 1 and [i["code"] for i in gate] == [CODE_REFUSES]
    refusal = gate[0]
    assert "AssertionError: --rollout-batch-size is too large for this miles" in refusal["message"]
    assert "raised at miles/utils/arguments.py:6" in refusal["message"]
    assert refusal["level"] == "error" and refusal["flags"] == ["--rollout-batch-size"]


def test_an_edit_to_the_checkout_is_judged_again(tmp_path) -> None:
    root = checkout(tmp_path / "miles", ACCEPTS)
    assert judge_preset(root).outcome == "accept"
    parser = root / "miles" / "utils" / "arguments.py"
    parser.write_text(REFUSES)
    stamp = time.time() + 5  # a later mtime, whatever the filesystem's resolution
    import os

    os.utime(parser, (stamp, stamp))
    assert judge_preset(root).outcome == "refuse"


def judge_preset(root: Path):
    return judge(resolve_preset(load_preset(PRESET)), gate_setup(root))


def test_a_parser_past_the_bound_is_a_warning_not_a_hang(tmp_path) -> None:
    root = checkout(tmp_path / "miles", SLEEPS)
    start = time.perf_counter()
    code, gate, _ = validate(root, "--miles-parser-timeout", "1")
    assert time.perf_counter() - start < 20
    assert [i["code"] for i in gate] == [CODE_UNAVAILABLE] and gate[0]["level"] == "warning"
    assert "ran past 1 s" in gate[0]["message"] and "--miles-parser-timeout" in gate[0]["fix"]
    assert not list(Path(tmp_path / "home").glob("miles-parser-gate/*.json"))  # not kept


def test_a_broken_miles_environment_is_a_warning_saying_what_to_fix(tmp_path) -> None:
    root = checkout(tmp_path / "miles", BROKEN)
    _, gate, _ = validate(root)
    assert [i["code"] for i in gate] == [CODE_UNAVAILABLE]
    assert "ModuleNotFoundError" in gate[0]["message"] and "--miles-python" in gate[0]["fix"]
    nothing = checkout(tmp_path / "other", ACCEPTS)
    _, gate, _ = validate(nothing, "--miles-python", str(tmp_path / "no-such-python"))
    assert [i["code"] for i in gate] == [CODE_UNAVAILABLE]
    assert "cannot start" in gate[0]["message"]


def test_not_a_miles_checkout_is_a_warning_without_running_anything(tmp_path) -> None:
    (tmp_path / "bare").mkdir()
    _, gate, _ = validate(tmp_path / "bare")
    assert [i["code"] for i in gate] == [CODE_UNAVAILABLE]
    assert "no miles/utils/arguments.py" in gate[0]["message"]


def test_timeout_zero_skips_and_says_so_and_a_bad_one_is_a_usage_error(
    tmp_path, monkeypatch
) -> None:
    root = checkout(tmp_path / "miles", REFUSES)
    _, gate, stderr = validate(root, "--miles-parser-timeout", "0")
    assert [i["code"] for i in gate] == [CODE_SKIPPED] and "checking" not in stderr
    monkeypatch.setenv("PPODECK_MILES_PARSER_TIMEOUT", "soon")
    code, _, stderr = validate(root)
    assert code == 2 and "$PPODECK_MILES_PARSER_TIMEOUT 'soon'" in stderr
    with pytest.raises(GateSetupError, match="negative"):
        gate_setup(root, timeout_s=-1)


def test_without_a_checkout_validate_says_the_parser_was_not_run() -> None:
    result = CliRunner().invoke(app, ["validate", PRESET, "--engine", "miles", "--json"])
    codes = [i["code"] for i in json.loads(result.stdout)["issues"]]
    assert CODE_SKIPPED in codes
    plain = CliRunner().invoke(app, ["validate", PRESET, "--json"])
    assert CODE_SKIPPED not in plain.stdout  # our engine: miles' parser has no say


def test_run_engine_miles_refuses_what_the_checkout_refuses(tmp_path, runs_dir) -> None:
    root = checkout(tmp_path / "miles", REFUSES)
    result = CliRunner().invoke(
        app,
        [
            "run",
            PRESET,
            "--engine",
            "miles",
            "--miles-root",
            str(root),
            "--submit",
            "http://cluster:8265",
            "--set",
            "kl-coef=0",
            "--set",
            "use-kl-loss=false",
        ],
    )  # a cluster's GPUs, no reference model: only miles' own parser is left to refuse
    assert result.exit_code == 1, result.stderr
    assert CODE_REFUSES in result.stderr and "nothing was launched" in result.stderr
    assert not list(runs_dir.glob("*"))
