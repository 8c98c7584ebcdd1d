"""Judging a run directory: `ppodeck health` and its exit code, health.jsonl written once by
concurrent readers, thresholds from the launch snapshot or the preset's [health] table."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from ppodeck.app.cli import health as cli_health
from ppodeck.engine.launch.local import prepare_run
from ppodeck.engine.presets import load_preset, resolve_preset
from ppodeck.engine.run.events import encode_event
from ppodeck.engine.run.health import (
    HEALTH_FILE,
    judge_run,
    record,
    recorded,
    run_level,
    run_thresholds,
    snapshot_thresholds,
)
from ppodeck.engine.run.rundir import RunDir, write_status
from tests.health.streams import stream
from tests.runs.conftest import fake_driver as fake_driver  # the fake driver seam

EV_NEGATIVE = {"critic/explained_variance": lambda r, s: -0.4}


def make_run(root: Path, events: list[dict], state: str = "succeeded") -> RunDir:
    config = resolve_preset(load_preset("tiny-cpu"))
    rundir = prepare_run(config, "tiny-cpu", run_dir=root / f"run{len(list(root.glob('*')))}")
    write_status(rundir, state=state)
    rundir.events_jsonl.write_bytes(b"".join(encode_event(e) for e in events))
    return rundir


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    cli_health.register(app)
    app.command("noop")(lambda: None)  # two commands: typer keeps "health" as a subcommand
    return app


def test_health_exits_0_when_healthy_and_4_on_an_error(app, runs_dir) -> None:
    runs_dir.mkdir()
    healthy = make_run(runs_dir, stream(20))
    sick = make_run(runs_dir, stream(20, bend=EV_NEGATIVE))
    runner = CliRunner()
    ok = runner.invoke(app, ["health", str(healthy.path)])
    assert ok.exit_code == 0, ok.output
    assert "OK" in ok.output and "20 rollouts judged" in ok.output
    bad = runner.invoke(app, ["health", str(sick.path), "--json"])
    assert bad.exit_code == 4
    report = json.loads(bad.stdout)
    assert report["level"] == "error"
    (finding,) = report["findings"]
    assert finding["code"] == "health.explained_variance_negative"
    assert finding["rollout_id"] == 5 and finding["threshold"] == 0.0 and finding["fix"]
    assert runner.invoke(app, ["health", "nope"]).exit_code == 2


def test_findings_are_recorded_once_whoever_judges(runs_dir) -> None:
    runs_dir.mkdir()
    rundir = make_run(runs_dir, stream(30, bend=EV_NEGATIVE))
    threads = [threading.Thread(target=judge_run, args=(rundir.path,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    judge_run(rundir.path)
    lines = (rundir.path / HEALTH_FILE).read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["kind"] == "health"
    assert [f.code for f in recorded(rundir.path)] == ["health.explained_variance_negative"]
    assert record(rundir.path, recorded(rundir.path)) == []
    assert (rundir.events_jsonl.read_bytes().count(b'"health"')) == 0  # never the driver's file


def test_runs_ls_level_judges_once_then_reads_the_record(runs_dir) -> None:
    runs_dir.mkdir()
    rundir = make_run(runs_dir, stream(30, bend=EV_NEGATIVE))
    assert run_level(rundir.path) == "1 error"
    rundir.events_jsonl.write_text("")  # would judge "ok" if it were read again
    os.utime(rundir.events_jsonl, (1, 1))
    assert run_level(rundir.path) == "1 error"


def test_thresholds_come_from_the_snapshot_then_the_preset(tmp_path) -> None:
    thresholds, source = run_thresholds(tmp_path, "tiny-cpu")
    assert source in ("defaults", "preset tiny-cpu [health]")
    snapshot_thresholds(tmp_path, {"clipfrac_max": 0.3, "disable": ("health.reward_flat",)})
    thresholds, source = run_thresholds(tmp_path, "tiny-cpu")
    assert thresholds.clipfrac_max == 0.3 and thresholds.disable == ("health.reward_flat",)
    assert source.endswith("health.toml")


def test_a_preset_health_table_is_parsed_and_a_bad_one_refused(tmp_path) -> None:
    from ppodeck.engine.presets import PresetError, read_preset_file

    good = tmp_path / "p.toml"
    good.write_text('name = "p"\n[flags]\nlr = 1e-6\n[health]\nclipfrac-max = 0.4\n')
    assert dict(read_preset_file(good).health) == {"clipfrac_max": 0.4}
    bad = tmp_path / "q.toml"
    bad.write_text('name = "q"\n[health]\nlr = 0.4\n')
    with pytest.raises(PresetError, match="unknown key 'lr'"):
        read_preset_file(bad)


def test_tail_shows_health_lines_and_runs_ls_a_health_column(runs_dir) -> None:
    from ppodeck.app.cli import runs as cli_runs

    runs_dir.mkdir()
    app = typer.Typer()
    cli_runs.register(app)
    sick = make_run(runs_dir, stream(12, bend=EV_NEGATIVE))
    runner = CliRunner()
    out = runner.invoke(app, ["tail", str(sick.path), "--kind", "health"])
    assert out.exit_code == 0, out.output
    (line,) = out.stdout.splitlines()
    assert "health" in line and "error health.explained_variance_negative rollout 5:" in line
    as_json = runner.invoke(app, ["tail", str(sick.path), "--json", "--kind", "health"])
    assert json.loads(as_json.stdout)["code"] == "health.explained_variance_negative"
    listed = runner.invoke(app, ["runs", "ls"])
    assert "health" in listed.stdout.splitlines()[0] and "1 error" in listed.stdout
    rows = json.loads(runner.invoke(app, ["runs", "ls", "--json"]).stdout)
    assert rows[0]["health"] == "1 error"


def test_run_keeps_the_preset_health_table_with_the_run(runs_dir, tmp_path, fake_driver
                                                          ) -> None:
    from ppodeck.app.cli import runs as cli_runs
    from ppodeck.engine.run.rundir import read_status
    from tests.runs.helpers import wait_for_state

    app = typer.Typer()
    cli_runs.register(app)
    preset = tmp_path / "strict.toml"
    preset.write_text('schema_version = 1\nname = "strict"\ndescription = ""\n'
                      'extends = "tiny-cpu"\n[health]\nclipfrac-max = 0.2\n')
    result = CliRunner().invoke(app, ["run", str(preset), "--detach"])
    assert result.exit_code == 0, result.output
    rundir = RunDir(runs_dir / result.stdout.strip())
    fake_driver.append(read_status(rundir)["pid"])
    assert "clipfrac_max=0.2" in result.stderr
    thresholds, source = run_thresholds(rundir.path, "tiny-cpu")
    assert thresholds.clipfrac_max == 0.2 and source.endswith("health.toml")
    wait_for_state(rundir, "succeeded")


def test_a_standalone_export_keeps_the_health_table_of_the_chain(tmp_path) -> None:
    from ppodeck.engine.presets import export_preset, parse_preset_text, read_preset_file

    child = tmp_path / "child.toml"
    child.write_text('name = "child"\nextends = "tiny-cpu"\n[health]\nhang-minutes = 90\n'
                     'disable = ["health.truncation"]\n')
    text = export_preset(read_preset_file(child))
    again = parse_preset_text(text, tmp_path / "out.toml")
    # the chain's table: tiny-cpu's own truncation-max under the child's keys
    assert dict(again.health) == {"truncation_max": 1.0, "hang_minutes": 90.0,
                                  "disable": ("health.truncation",)}
    assert again.extends is None and again.flags["num_layers"] == 2
