"""Every override the engine applies at start-up has one row in engine/config/rules_overrides.py:
check() reports it as an info before launch, and the driver announces it once, as a warning in
driver.log and the run's events."""

from __future__ import annotations

from pathlib import Path

import pytest

from ppodeck.engine.config import check
from ppodeck.engine.config.rules_overrides import OVERRIDES, start_announcements
from ppodeck.engine.presets import config_to_toml, load_preset, resolve_preset

TINY = resolve_preset(load_preset("tiny-cpu"))


def _cases(tmp: Path) -> dict[str, dict]:
    (tmp / "empty").mkdir(exist_ok=True)
    return {
        "override.num_query_groups_unused": {"group_query_attention": False,
                                             "num_query_groups": 2},
        "override.rope_forced": {"use_rotary_position_embeddings": True,
                                 "position_embedding_type": "learned_absolute"},
        "override.load_not_a_checkpoint": {"load": str(tmp / "empty")},
        "override.synthetic_data_keys": {"input_key": "question"},
    }


def test_each_override_is_an_info_in_check_naming_its_flags(tmp_path: Path) -> None:
    for code, values in _cases(tmp_path).items():
        issues = [i for i in check(TINY.with_values(**values)).issues if i.code == code]
        assert len(issues) == 1, code
        assert issues[0].level == "info" and issues[0].fix
        assert {f"--{d.replace('_', '-')}" for d in values} <= set(issues[0].flags), code
    assert not {i.code for i in check(TINY).issues if i.code.startswith("override.")}


def test_a_load_that_does_not_exist_yet_is_a_fresh_run_not_an_override(tmp_path: Path) -> None:
    config = TINY.with_values(load=str(tmp_path / "not-yet"))
    assert "override.load_not_a_checkpoint" not in check(config).codes()


def test_the_environment_speaks_at_start_only() -> None:
    config = TINY.with_values(use_tensorboard=True, tb_project_name="p")
    assert "override.tensorboard_dir_env" not in check(config).codes()  # check() is pure
    said = start_announcements(config, {"TENSORBOARD_DIR": "/tb"})
    assert any("$TENSORBOARD_DIR (/tb) wins" in line for line in said)
    assert not start_announcements(config, {})


def test_every_row_has_a_fix_and_a_unique_code() -> None:
    codes = [row.code for row in OVERRIDES]
    assert len(codes) == len(set(codes)) and all(row.fix for row in OVERRIDES)


@pytest.mark.parametrize("passthrough", [("--moe-token-dispatcher-type", "alltoall"), ()])
def test_the_driver_announces_each_once_in_the_log_and_the_events(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], passthrough: tuple[str, ...]) -> None:
    from ppodeck.engine.driver.ppo import announce_overrides
    from ppodeck.engine.driver.telemetry import Telemetry
    from ppodeck.engine.run.events import EventWriter, read_events
    from ppodeck.engine.run.rundir import RunDir

    rundir = RunDir(tmp_path / "run")
    rundir.path.mkdir()
    config = TINY.with_values(group_query_attention=False, num_query_groups=2,
                              attention_backend="flash" if passthrough else None)
    config = type(config)(config.values, passthrough)
    rundir.config_toml.write_text(config_to_toml(config, name="t", description=""))
    writer = EventWriter(rundir.events_jsonl)
    announce_overrides(rundir, Telemetry(writer, 0))
    writer.close()
    events, _ = read_events(rundir.events_jsonl)
    said = [e["msg"] for e in events if e.get("source") == "overrides"]
    assert all(e["level"] == "warning" for e in events if e.get("source") == "overrides")
    assert len(said) == 1 + 2 * bool(passthrough)
    assert "--num-query-groups 2 is unused" in said[0]
    if passthrough:  # what check() warns of as engine.passthrough_ignored and .command_only
        assert "--moe-token-dispatcher-type" in said[1]
        assert "does not read --attention-backend" in said[2]
    assert capsys.readouterr().err.count("warning [overrides]: ") == len(said)  # driver.log


def test_a_train_override_a_worker_reports_is_announced_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A compile that fell back to eager (engine/train/layer_compile.py new_fallback) comes back
    with the train call; the driver says it as a warning event and in driver.log."""
    from types import SimpleNamespace

    from ppodeck.engine.driver.ppo import report_rollout
    from ppodeck.engine.driver.roles import logging_rank
    from ppodeck.engine.driver.telemetry import Telemetry
    from ppodeck.engine.run.events import EventWriter, read_events

    line = "actor transformer layers: torch.compile failed (X); the layers run eager from now on"
    actor = logging_rank([{"step_metrics": [], "overrides": []},
                          {"step_metrics": [{"train/loss": 1.0}], "overrides": [line]}])
    writer = EventWriter(tmp_path / "events.jsonl")
    report_rollout({}, Telemetry(writer, 0), 0, SimpleNamespace(metrics={}), None, actor)
    writer.close()
    events, _ = read_events(tmp_path / "events.jsonl")
    assert [(e["level"], e["msg"]) for e in events if e.get("source") == "train"] == [
        ("warning", line)]
    assert capsys.readouterr().err.count(line) == 1


def test_what_the_rollout_announces_itself_is_not_said_twice() -> None:
    """tiny-cpu's synthetic task replaces --input-key: check() says so, the rollout manager
    announces it where it applies it, and the driver's table does not say it again."""
    config = TINY.with_values(input_key="question")
    [issue] = [i for i in check(config).issues if i.code == "override.synthetic_data_keys"]
    assert "--input-key question ignored" in issue.message
    assert not start_announcements(config, {})
