"""Each preset says which engines it runs on (issue #46): `engines = [...]` in its file (default
both, inherited along extends); `validate`/`run --engine E` of a preset that does not run on E
is the error preset.engines, saying why and what to use instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ppodeck.app.cli.root import app
from ppodeck.engine.presets import (
    ENGINES,
    PresetError,
    engine_refusal,
    export_preset,
    list_presets,
    load_preset,
    parse_preset_text,
    preset_engines,
    resolve_preset,
)

STANDIN_PRESET = Path(__file__).resolve().parents[1] / "miles_standin" / "tiny-cpu-standin.toml"


def test_builtins_say_where_they_run_and_children_inherit() -> None:
    assert preset_engines(load_preset("tiny-cpu")) == ("ppodeck",)
    assert preset_engines(load_preset("tiny-llama3-cpu")) == ("ppodeck",)  # extends tiny-cpu
    assert preset_engines(load_preset("qwen3-4b-ppo-ci")) == ENGINES  # extends qwen3-4b-ppo
    assert preset_engines(load_preset("qwen3-0.6b-ppo-miles-1gpu")) == ("miles",)
    assert preset_engines(load_preset(str(STANDIN_PRESET))) == ENGINES


def test_a_preset_on_miles_needs_nothing_only_our_engine_has() -> None:
    """What makes a preset ppodeck-only: PPO Deck's own prompt/weight flags, a GGUF file."""
    for preset in list_presets():
        if preset.source != "built-in" or "miles" not in preset_engines(preset):
            continue
        config = resolve_preset(preset)
        assert engine_refusal(preset, "miles", config) is None
        assert not config.is_set("synthetic_task") and not config.is_set("model_init"), preset
        assert not str(config.get("hf_checkpoint")).endswith(".gguf"), preset.name


def test_without_the_key_a_preset_runs_on_both(tmp_path) -> None:
    path = tmp_path / "p.toml"
    assert parse_preset_text('name = "p"\n', path).engines is None
    assert preset_engines(parse_preset_text('name = "p"\n', path)) == ENGINES


@pytest.mark.parametrize("value", ['["megatron"]', "[]", '"miles"'])
def test_a_bad_engines_value_names_its_line_and_the_fix(tmp_path, value) -> None:
    path = tmp_path / "p.toml"
    with pytest.raises(PresetError, match=r"p.toml:2: engines must be a non-empty list") as err:
        parse_preset_text(f'name = "p"\nengines = {value}\n', path)
    assert 'engines = ["ppodeck", "miles"]' in str(err.value)


def test_validate_on_an_engine_the_preset_does_not_run_on_is_an_error() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["validate", "tiny-cpu", "--engine", "miles", "--json"])
    assert result.exit_code == 1
    refusal = [i for i in json.loads(result.stdout)["issues"] if i["code"] == "preset.engines"]
    assert len(refusal) == 1 and refusal[0]["level"] == "error"
    assert "runs on ppodeck only, not miles" in refusal[0]["message"]
    assert "--synthetic-task is PPO Deck's own" in refusal[0]["message"]
    assert "qwen3-4b-ppo" in refusal[0]["fix"] and "--engine ppodeck" in refusal[0]["fix"]
    gguf = runner.invoke(app, ["validate", "smollm2-135m-cpu", "--engine", "miles"])
    assert "preset.engines" in gguf.stdout and "single GGUF file" in gguf.stdout
    ours = runner.invoke(app, ["validate", "tiny-cpu", "--json"])
    assert "preset.engines" not in ours.stdout
    miles_only = runner.invoke(app, ["validate", "qwen3-0.6b-ppo-miles-1gpu", "--json"])
    assert "runs on miles only, not ppodeck" in miles_only.stdout
    both = runner.invoke(app, ["validate", str(STANDIN_PRESET), "--engine", "miles", "--json"])
    assert "preset.engines" not in both.stdout


def test_run_engine_miles_refuses_a_preset_that_cannot_run_there(runs_dir) -> None:
    standin = STANDIN_PRESET.parent
    result = CliRunner().invoke(
        app, ["run", "tiny-cpu", "--engine", "miles", "--miles-root", str(standin)]
    )
    assert result.exit_code == 1 and "preset.engines" in result.stderr
    assert not list(runs_dir.glob("*"))


def test_presets_ls_shows_the_engines() -> None:
    shown = CliRunner().invoke(app, ["presets", "ls"]).stdout.splitlines()
    assert shown[0].split() == ["name", "source", "engines", "description"]
    tiny = next(line for line in shown if line.startswith("tiny-cpu "))
    assert tiny.split()[2] == "ppodeck"
    listed = json.loads(CliRunner().invoke(app, ["presets", "ls", "--json"]).stdout)
    assert {p["name"]: p["engines"] for p in listed}["qwen3-4b-ppo"] == ["ppodeck", "miles"]


def test_a_standalone_export_keeps_the_engines(tmp_path) -> None:
    text = export_preset(load_preset("tiny-llama3-cpu"))
    assert 'engines = ["ppodeck"]' in text
    again = parse_preset_text(text, tmp_path / "x.toml")
    assert preset_engines(again) == ("ppodeck",)
    assert "\nengines = " not in export_preset(load_preset("qwen3-4b-ppo"))  # both: default
