from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability import helpers


@pytest.fixture
def isolated_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No user or team presets leak in from the machine running the tests."""
    monkeypatch.setenv("PPODECK_CONFIG_DIR", str(tmp_path / "config"))
    _seed_machine_facts(tmp_path / "home")
    monkeypatch.setenv("PPODECK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PPODECK_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.delenv("PPODECK_PRESET_PATH", raising=False)
    return tmp_path


def _seed_machine_facts(home: Path) -> None:
    """The machine's probed bounds, copied from the home the suite runs with: a fresh home
    would make each driver these tests start probe the machine again (engine/host/probe.py),
    seconds of CPU beside the run on a 2-core machine."""
    from ppodeck.engine.host.probe import facts_path

    facts = facts_path()
    if facts.is_file():
        home.mkdir(parents=True, exist_ok=True)
        shutil.copy(facts, home / facts.name)


@pytest.fixture
def started() -> Iterator[list[int]]:
    """Tests append every PID they start (ppodeck, drivers, TUIs); teardown kills those PIDs,
    their process groups and their sessions, whatever the test left behind."""
    pids: list[int] = []
    yield pids
    helpers.kill_everything(pids)


@pytest.fixture(scope="module")
def module_started() -> Iterator[list[int]]:
    pids: list[int] = []
    yield pids
    helpers.kill_everything(pids)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from tests.reliability import fuzz_counts

    if os.environ.get("PPODECK_RELIABILITY_FIGURES"):
        helpers.record_figure("fuzz_examples", dict(fuzz_counts.COUNTS))
