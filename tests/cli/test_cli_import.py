"""`presets from-command` and `validate --from-command` on a launch script given as a path."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app

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
