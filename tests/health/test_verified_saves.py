"""Verified saves on a real tiny-cpu run with saves: each save's manifest, the driver's check of
it and its critic sibling, and a resume that names a cut, truncated, changed or deleted file
of the actor's or the critic's save, never loads it, and takes the newest whole save on --yes.

The run is the session's `killed_tiny_run` (tests/reliability/killed_run.py, shared with the
driver-kill tests): saved after rollouts 1 and 3, its driver SIGKILLed in rollout 5; each test
here damages or resumes a copy of it as it was right after the kill."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from ppodeck.app.cli.root import app as root_app
from ppodeck.engine.config import resolve
from ppodeck.engine.config.resolve import TRACKER
from ppodeck.engine.launch.local import prepare_resume
from ppodeck.engine.launch.resume_check import light_problems
from ppodeck.engine.presets import config_from_toml
from ppodeck.engine.run.events import read_events
from ppodeck.engine.run.rundir import RunDir, read_status
from ppodeck.engine.run.save_manifest import MANIFEST, verify_save, write_manifest
from tests.engine.helpers import driver_log_tail
from tests.reliability.killed_run import SAVE_ROOT, SAVED, KilledRun

pytestmark = pytest.mark.timeout(900)

ACTOR, CRITIC = SAVE_ROOT, f"{SAVE_ROOT}_critic"  # the run's --save and its critic sibling


@pytest.fixture
def saved_run(killed_tiny_run: KilledRun) -> RunDir:
    """tiny-cpu saved after rollouts 1 and 3 (the warmup is rollout 0), as it was when killed."""
    return killed_tiny_run.pristine


@pytest.fixture
def copy(saved_run: RunDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunDir:
    """A stopped copy of the run to damage (the session's run stays whole)."""
    monkeypatch.setenv("PPODECK_RUNS_DIR", str(tmp_path))
    target = tmp_path / saved_run.id
    shutil.copytree(saved_run.path, target)
    status = json.loads((target / "status.json").read_text())
    status.update(state="stopped")
    (target / "status.json").write_text(json.dumps(status))
    return RunDir(target)


def _args(rundir: RunDir) -> dict:
    config = config_from_toml(rundir.config_toml.read_text(), rundir.config_toml)
    config = config.with_values(load=config.get("save"), run_dir=str(rundir.path))
    return resolve(config, os.environ)


def _cli() -> typer.Typer:
    return root_app


def _halve(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_each_save_has_a_manifest_and_the_driver_checked_it(saved_run: RunDir) -> None:
    for root in (ACTOR, CRITIC):
        for iteration in SAVED:
            save = saved_run.path / root / f"iter_{iteration:07d}"
            assert (save / MANIFEST).is_file() and verify_save(save) == []
    events, _ = read_events(saved_run.events_jsonl)
    checks = [e["save_check"] for e in events if e.get("save_check")]
    assert [(c["rollout_id"], c["ok"]) for c in checks] == [(i, True) for i in SAVED]
    # the same run's train phases carry their achieved TFLOP/s; their MFU once the launch probe
    # (engine/host/probe.py) has measured this CPU's matmul peak, against that peak
    perf = {e["step"]: e["metrics"] for e in events if e["kind"] == "metrics"
            and e.get("step_key") == "rollout/step"}
    assert perf[0]["perf/critic_train_tflops"] > 0 and "perf/actor_train_tflops" not in perf[0]
    assert perf[3]["perf/actor_train_tflops"] > 0
    if "perf/actor_train_mfu" in perf[3]:
        assert perf[3]["perf/actor_train_mfu"] == pytest.approx(
            perf[3]["perf/actor_train_tflops"] / perf[3]["perf/mfu_peak_tflops"])


@pytest.mark.parametrize(("root", "file", "damage", "said"), [
    (ACTOR, "__0_0.distcp", _halve, "bytes, the save wrote"),
    (CRITIC, "common.pt", lambda p: p.write_bytes(b""), "bytes, the save wrote"),
    (ACTOR, ".metadata", Path.unlink, "deleted"),
    (CRITIC, "__0_1.distcp",
     lambda p: p.write_bytes(bytes([p.read_bytes()[0] ^ 1]) + p.read_bytes()[1:]), "sha256"),
])
def test_a_damaged_save_is_named_and_the_resume_refused(copy: RunDir, root, file, damage,
                                                        said) -> None:
    target = copy.path / root / "iter_0000003" / file
    damage(target)
    (problem,) = light_problems(_args(copy))
    assert str(target) in problem and said in problem and "iteration 1" in problem
    events = copy.events_jsonl.read_bytes()
    result = CliRunner().invoke(_cli(), ["run", "--resume", str(copy.path)], input="n\n")
    assert result.exit_code == 1, result.output
    assert str(target) in result.output and "newest whole save is iteration 1" in result.output
    assert copy.events_jsonl.read_bytes() == events  # nothing moved, nothing started
    assert (copy.path / root / TRACKER).read_text() == "3"
    assert read_status(copy)["state"] == "stopped"


def test_a_save_without_manifest_is_checked_against_its_torch_dist_index(copy: RunDir) -> None:
    """A miles run's saves have no manifest: the shard index still finds a short file."""
    save = copy.path / ACTOR / "iter_0000003"
    (save / MANIFEST).unlink()
    assert verify_save(save) == []
    _halve(save / "__0_1.distcp")
    (damage,) = verify_save(save)
    assert damage.file == "__0_1.distcp" and "truncated" in damage.what
    (save / "common.pt").unlink()
    assert {d.file for d in verify_save(save)} == {"__0_1.distcp", "common.pt"}


def test_a_missing_critic_sibling_is_damage(copy: RunDir) -> None:
    shutil.rmtree(copy.path / CRITIC / "iter_0000001")
    _halve(copy.path / ACTOR / "iter_0000003" / "__0_0.distcp")
    with pytest.raises(Exception, match="No older save of this run is whole"):
        prepare_resume(copy, config_from_toml(copy.config_toml.read_text(), copy.config_toml))


def test_yes_takes_the_newest_whole_save_and_the_run_resumes(copy: RunDir, monkeypatch
                                                             ) -> None:
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    _halve(copy.path / CRITIC / "iter_0000003" / "__0_0.distcp")
    # the run was started for 40 rollouts: resumed at rollout 2, 4 saves at rollout 3 and ends
    result = CliRunner().invoke(_cli(), ["run", "--resume", str(copy.path), "--yes",
                                         "--set", "num-rollout=4"])
    assert result.exit_code == 0, result.output + driver_log_tail(copy)
    assert "--yes: the newest whole save is iteration 1" in result.output
    assert "resuming run" in result.output and "at rollout 2" in result.output
    events, _ = read_events(copy.events_jsonl)
    logs = [e.get("msg", "") for e in events if e["kind"] == "log"]
    assert any("resumed from the checkpoint of rollout 1" in m for m in logs)
    assert read_status(copy)["state"] == "succeeded"
    assert verify_save(copy.path / CRITIC / "iter_0000003") == []  # saved again, whole


def test_write_manifest_lists_every_file(tmp_path: Path) -> None:
    (tmp_path / "metadata.json").write_text("{}")
    (tmp_path / "a.distcp").write_bytes(b"x" * 10)
    write_manifest(tmp_path)
    files = json.loads((tmp_path / MANIFEST).read_text())["files"]
    assert set(files) == {"metadata.json", "a.distcp"} and files["a.distcp"]["bytes"] == 10


def test_runs_saves_lists_each_iteration_with_its_damage(copy: RunDir) -> None:
    target = copy.path / CRITIC / "iter_0000003" / "__0_0.distcp"
    _halve(target)
    result = CliRunner().invoke(_cli(), ["runs", "saves", str(copy.path)])
    assert result.exit_code == 1, result.output
    assert "iteration 3: DAMAGED" in result.output and str(target) in result.output
    assert "iteration 1: whole" in result.output
    # a save directory without manifests (as miles writes them): its shard index is the check
    for manifest in copy.path.glob(f"{ACTOR}*/iter_*/{MANIFEST}"):
        manifest.unlink()
    result = CliRunner().invoke(_cli(), ["runs", "saves", str(copy.path / ACTOR), "--quick"])
    assert result.exit_code == 1 and "truncated" in result.output, result.output
