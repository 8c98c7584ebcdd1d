"""`ppodeck compare` (config diff, phase times, final and best diagnostics) and `ppodeck plot`."""

from __future__ import annotations

import json
import sys

import pytest
import typer
from typer.testing import CliRunner

from ppodeck.app.cli import health as cli_health
from ppodeck.engine.launch.local import prepare_run
from ppodeck.engine.presets import load_preset, resolve_preset
from ppodeck.engine.run.events import encode_event
from ppodeck.engine.run.rundir import RunDir, write_status
from tests.health.streams import stream


def make_run(root, name: str, events: list[dict], **flags) -> RunDir:
    config = resolve_preset(load_preset("tiny-cpu")).with_values(**flags)
    rundir = prepare_run(config, "tiny-cpu", run_dir=root / name)
    write_status(rundir, state="succeeded")
    phases = [{"v": 1, "ts": 1.0, "kind": "phase", "name": "generate", "state": "end",
               "rollout_id": 0, "seconds": s} for s in (0.2, 0.4)]
    rundir.events_jsonl.write_bytes(b"".join(encode_event(e) for e in phases + events))
    return rundir


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    cli_health.register(app)
    return app


def test_compare_diffs_configs_phases_and_diagnostics(app, tmp_path) -> None:
    a = make_run(tmp_path, "a", stream(10))
    b = make_run(tmp_path, "b", stream(6, bend={"rollout/raw_reward": lambda r, s: 0.5}),
                 lr=1e-4)
    out = CliRunner().invoke(app, ["compare", str(a.path), str(b.path), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["config_diff"] == {"--lr": [0.002, 0.0001]}
    assert data["phase_mean_seconds"]["generate"] == [pytest.approx(0.3)] * 2
    reward_a, reward_b = data["diagnostics"]["rollout/raw_reward"]
    assert reward_b == {"final": 0.5, "best": {"rollout": 0, "value": 0.5}, "rollouts": 6}
    assert reward_a["rollouts"] == 10 and reward_a["best"]["value"] >= reward_a["final"]
    assert data["diagnostics"]["train/pg_clipfrac"][0]["best"] is None  # no "better" way
    text = CliRunner().invoke(app, ["compare", str(a.path), str(b.path)])
    assert "--lr" in text.stdout and "300 ms" in text.stdout
    assert CliRunner().invoke(app, ["compare", str(a.path)]).exit_code == 2


def test_plot_writes_png_and_svg(app, tmp_path) -> None:
    a = make_run(tmp_path, "a", stream(8))
    bad = CliRunner().invoke(app, ["plot", str(a.path), "--out", str(tmp_path / "x.jpg")])
    assert bad.exit_code == 2 and ".png or .svg" in bad.stderr
    pytest.importorskip("matplotlib")  # the `plot` extra; its absence is tested below
    for suffix, magic in ((".png", b"\x89PNG"), (".svg", b"<svg")):
        out = tmp_path / f"run{suffix}"
        result = CliRunner().invoke(app, ["plot", str(a.path), "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert magic in out.read_bytes()[:400]


def test_plot_without_matplotlib_names_the_extra(app, tmp_path, monkeypatch) -> None:
    a = make_run(tmp_path, "a", stream(4))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    result = CliRunner().invoke(app, ["plot", str(a.path), "--out", str(tmp_path / "p.png")])
    assert result.exit_code == 2 and "pip install 'ppodeck[plot]'" in result.stderr
