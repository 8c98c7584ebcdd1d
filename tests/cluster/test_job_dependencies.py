"""The job's entrypoint checks the cluster's Python for the engine's dependencies before
importing the driver, and names what is missing in the run's status (no traceback)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from ppodeck.engine.driver import job_entry as jobs
from ppodeck.engine.run.rundir import RunDir, read_status

REPO = Path(__file__).resolve().parents[2]


def test_a_missing_dependency_fails_the_job_with_its_name(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]):
    monkeypatch.setattr(jobs, "ENGINE_REQUIREMENTS",
                        (*jobs.ENGINE_REQUIREMENTS, ("ppodeck_absent_module", "absent-dist==1.0")))
    monkeypatch.setenv("PPODECK_RUNS_DIR", str(tmp_path))
    monkeypatch.setenv(jobs.CONFIG_ENV, "[flags]\n")
    assert jobs.run_job("r1") == 3
    status = read_status(RunDir(tmp_path / "r1"))
    assert status["state"] == "failed"
    assert "absent-dist==1.0" in status["detail"] and "pip install" in status["detail"]
    out = capsys.readouterr().out
    assert "Traceback" not in out
    assert re.search(r"PPODECK_EVENT \d+ .*absent-dist==1.0", out)  # relayed to the follower


def test_the_checked_requirements_are_the_projects_own():
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for _, requirement in jobs.ENGINE_REQUIREMENTS:
        assert requirement in declared, f"{requirement} is not pinned so in pyproject.toml"
    assert jobs.missing_engine_requirements() == []  # this environment has them all
