"""`ppodeck samples RUN`: the table, --sort, --json, and the messages for what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from ppodeck.app.cli import samples as cli_samples
from ppodeck.engine.run.rundir import RunDir, create_run_dir, write_status
from tests.fixtures.make_samples import write_run


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    cli_samples.register(app)
    app.command("noop", hidden=True)(lambda: None)  # a group: `samples` stays a subcommand
    return app


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunDir:
    monkeypatch.setenv("PPODECK_RUNS_DIR", str(tmp_path / "runs"))
    rundir = create_run_dir("tiny-cpu")
    write_status(rundir, state="succeeded", preset="tiny-cpu")
    return rundir


def invoke(app: typer.Typer, *args: str):  # noqa: ANN201
    return CliRunner().invoke(app, ["samples", *args])


def test_the_latest_rollout_as_a_table(app, run) -> None:
    write_run(run.path, rollouts=3, samples=8)
    result = invoke(app, run.id)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:7] == ["rollout", "index", "raw", "reward", "adv", "length", "status"]
    assert len(lines) == 1 + 8 and all(line.split()[0] == "2" for line in lines[1:])
    assert "rollout 2, 8 samples (rollouts with samples: 0-2; samples/ holds" in result.stderr


def test_sort_by_reward_and_advantage(app, run) -> None:
    write_run(run.path, rollouts=1, samples=12)
    by_reward = invoke(app, run.id, "--rollout", "0", "--sort", "reward")
    rewards = [float(line.split()[3]) for line in by_reward.stdout.splitlines()[1:]]
    assert rewards == sorted(rewards, reverse=True) and len(set(rewards)) == 2
    by_adv = invoke(app, run.id, "-r", "0", "--sort", "advantage")
    advs = [float(line.split()[4]) for line in by_adv.stdout.splitlines()[1:]]
    assert advs == sorted(advs, reverse=True)
    assert invoke(app, run.id, "--sort", "size").exit_code == 2


def test_json_has_every_field_and_the_per_token_lists(app, run) -> None:
    write_run(run.path, rollouts=2, samples=4)
    result = invoke(app, run.id, "--rollout", "1", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [d["index"] for d in data] == [0, 1, 2, 3]
    first = data[0]
    for key in ("rollout_id", "index", "prompt", "response", "label", "reward", "status",
                "tokens", "log_probs", "rollout_log_probs", "values", "returns", "advantages",
                "entropy", "loss_mask"):
        assert key in first
    assert len(first["advantages"]) == first["response_length"] == len(first["tokens"])
    assert first["rollout_id"] == 1


def test_missing_samples_and_rollouts_are_explained(app, run) -> None:
    result = invoke(app, run.id)
    assert result.exit_code == 2 and "has no samples" in result.stderr
    assert "--samples-per-rollout" in result.stderr
    write_run(run.path, rollouts=2, samples=2)
    result = invoke(app, run.id, "--rollout", "9")
    assert result.exit_code == 2
    assert "no samples for rollout 9; it has rollouts 0-1" in result.stderr
    assert invoke(app, "no-such-run").exit_code == 2


def test_a_torn_last_line_is_a_warning_not_a_failure(app, run) -> None:
    write_run(run.path, rollouts=1, samples=3)
    path = run.samples / "rollout_0.jsonl"
    path.write_text(path.read_text() + '{"rollout_id": 0, "ind')
    result = invoke(app, run.id)
    assert result.exit_code == 0 and len(result.stdout.splitlines()) == 1 + 3
    assert "rollout_0.jsonl:4: incomplete last line" in result.stderr


def test_response_start_is_one_cut_line() -> None:
    from ppodeck.engine.run.samples import one_line

    assert one_line("a\nb\tc") == "a⏎b→c"
    assert one_line("x" * 100, width=10) == "x" * 9 + "…"


def test_sort_by_gap_and_the_hint_health_prints(app, run) -> None:
    write_run(run.path, rollouts=2, samples=6)
    result = invoke(app, run.id, "-r", "1", "--sort", "gap")
    assert result.exit_code == 0, result.output
    from ppodeck.engine.run.samples import read_samples

    by_index = {r.index: r.max_gap for r in read_samples(run.path, 1)}
    shown = [by_index[int(line.split()[1])] for line in result.stdout.splitlines()[1:]]
    assert shown == sorted(shown, reverse=True)
    hint = cli_samples.finding_hint(run.path, run.id, "health.truncation", 1)
    assert hint == (f"samples: ppodeck samples {run.id} --rollout 1 --sort length "
                    "(the longest (truncated) responses first)")
    assert cli_samples.finding_hint(run.path, run.id, "health.truncation", 7) is None
    assert cli_samples.finding_hint(run.path, run.id, "health.hang", 1) is None
