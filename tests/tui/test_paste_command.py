"""The TUI's paste: a miles launch script becomes an import report, then the flag editor."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Input, TextArea

from ppodeck.app.tui.app import PPODeckApp
from ppodeck.app.tui.screens.edit import EditScreen
from ppodeck.app.tui.screens.paste import PasteCommandScreen, _line_style
from ppodeck.app.tui.screens.presets import PresetPickerScreen
from ppodeck.app.tui.widgets.issues_panel import IssuesPanel
from ppodeck.engine.presets import load_preset, user_preset_dir
from tests.tui.conftest import wait_until

SCRIPT = """\
#!/bin/bash
MODEL_ARGS=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 32)
ROLLOUT_ARGS=(
   --rollout-batch-size 8
   --n-samples-per-prompt 4
)
python3 train.py ${MODEL_ARGS[@]} ${ROLLOUT_ARGS[@]} \\
   --advantage-estimator ppo --balance-data --use-opsm --prompt-data ${DATA_DIR}/train.jsonl
"""


def _editor_counts(editor: EditScreen) -> tuple[int, int]:
    levels = [issue.level for issue in editor.panel_issues()]
    return levels.count("error"), levels.count("warning")


def _cli_counts(script: str) -> tuple[int, int]:
    import re

    from typer.testing import CliRunner

    from ppodeck.app.cli.root import app as cli

    Path("pasted.sh").write_text(script)
    out = CliRunner().invoke(cli, ["validate", "--from-command", "pasted.sh"]).stdout
    found = re.search(r"\((\d+) errors?, (\d+) warnings?", out)
    assert found, out
    return int(found.group(1)), int(found.group(2))


async def test_pasting_a_script_shows_the_report_then_opens_the_editor() -> None:
    app = PPODeckApp()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, PresetPickerScreen))
        await pilot.press("ctrl+g")
        await wait_until(pilot, lambda: isinstance(app.screen, PasteCommandScreen))
        screen = app.screen
        screen.query_one("#paste-text").load_text(SCRIPT)
        await pilot.press("ctrl+y")
        await pilot.pause()
        report = str(screen.query_one("#paste-report").render())
        assert "resolved (" in report and "$MODEL_ARGS" in report
        assert "${DATA_DIR} (<pasted>:8): DATA_DIR is not defined" in report  # unresolved
        assert "--balance-data" in report  # command-only
        assert "--use-opsm" in report  # refused, with the reason
        await pilot.click("#open")
        await wait_until(pilot, lambda: isinstance(app.screen, EditScreen))
        editor = app.screen
        assert editor.preset_name == "pasted"
        assert editor.config.get("num_layers") == 2
        assert editor.config.get("n_samples_per_prompt") == 4
        assert _editor_counts(editor) == _cli_counts(SCRIPT)  # one count, TUI and CLI
        # Esc on an import saved nowhere asks first; cancelling keeps it
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen.id == "discard-import")
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is editor)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen.id == "discard-import")
        await pilot.press("ctrl+y")
        await wait_until(pilot, lambda: isinstance(app.screen, PresetPickerScreen))


async def test_an_empty_paste_says_so_and_keeps_the_dialog() -> None:
    app = PPODeckApp()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, PresetPickerScreen))
        app.open_paste()
        await wait_until(pilot, lambda: isinstance(app.screen, PasteCommandScreen))
        await pilot.press("ctrl+y")
        await pilot.pause()
        assert "Nothing to import" in str(app.screen.query_one("#paste-report").render())
        assert app.screen.query_one("#open").disabled


async def _import(pilot, app: PPODeckApp, text: str = "", name: str = "") -> PasteCommandScreen:
    await wait_until(pilot, lambda: isinstance(app.screen, PresetPickerScreen))
    await pilot.press("ctrl+g")
    await wait_until(pilot, lambda: isinstance(app.screen, PasteCommandScreen))
    screen = app.screen
    assert isinstance(screen, PasteCommandScreen)
    screen.query_one("#paste-name", Input).value = name
    screen.query_one("#paste-text", TextArea).load_text(text)
    await pilot.press("ctrl+y")
    await pilot.pause()
    return screen


async def _open_in_editor(pilot, app: PPODeckApp) -> tuple[EditScreen, IssuesPanel]:
    """Enter on the import report: the editor, once its Issues panel has judged the config."""
    await pilot.press("enter")
    await wait_until(pilot, lambda: isinstance(app.screen, EditScreen))
    editor = app.screen
    panel = editor.query_one(IssuesPanel)
    await wait_until(pilot, lambda: bool(panel.issues))
    return editor, panel


async def test_a_preset_saved_from_a_paste_keeps_each_flags_script_line(tui_env: Path) -> None:
    app = PPODeckApp()
    async with app.run_test(size=(140, 44)) as pilot:
        screen = await _import(pilot, app, SCRIPT, name="run-tiny.sh")
        assert "import report: run-tiny.sh" in str(screen.query_one("#paste-report").render())
        assert app.focused is screen.query_one("#open")  # enter opens the editor
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, EditScreen))
        editor = app.screen
        assert isinstance(editor, EditScreen) and editor.preset_name == "run-tiny"
        editor.config = editor.config.with_values(rollout_batch_size=16)  # edited after import
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: app.screen.id == "save-dialog")
        name = app.screen.query_one("#name", Input)
        assert name.value == "run-tiny"  # the script's name, not "run-tiny-edited"
        name.value = "from-paste"
        await pilot.click("#confirm")
        await wait_until(pilot, lambda: app.screen is editor)
    text = (user_preset_dir() / "from-paste.toml").read_text()
    lines = {line.split(" = ")[0]: line for line in text.splitlines() if " = " in line}
    assert lines["num-layers"] == "num-layers = 2 # run-tiny.sh:2 via $MODEL_ARGS"
    assert lines["n-samples-per-prompt"].endswith("# run-tiny.sh:5 via $ROLLOUT_ARGS")
    assert lines["advantage-estimator"].endswith("# run-tiny.sh:8")
    assert lines["rollout-batch-size"] == "rollout-batch-size = 16"  # no longer the script's
    assert "Imported from run-tiny.sh" in text
    assert "FIX BEFORE USE: unresolved variables kept verbatim: $DATA_DIR" in text
    assert load_preset("from-paste").flags["num_layers"] == 2  # the comments keep it loadable


async def test_a_path_with_an_empty_box_reads_the_script_and_what_it_sources(
        tui_env: Path) -> None:
    folder = tui_env / "scripts"
    folder.mkdir()
    (folder / "model.sh").write_text("MODEL_ARGS=(--num-layers 3 --hidden-size 64)\n")
    (folder / "run.sh").write_text('source "$(dirname "$0")/model.sh"\n'
                                   "python3 train.py ${MODEL_ARGS[@]} --lr 2e-6\n")
    app = PPODeckApp()
    async with app.run_test(size=(140, 44)) as pilot:
        screen = await _import(pilot, app, name=str(folder / "run.sh"))
        assert screen.imported is not None
        assert screen.imported.config.get("num_layers") == 3  # from the sourced file
        assert screen.imported.origins["--num-layers"].file == "model.sh"
        assert "python3 train.py" in screen.query_one("#paste-text", TextArea).text
        assert screen.has_class("-imported")


def test_the_report_marks_what_needs_a_look() -> None:
    assert "yellow" in _line_style("  unresolved (1):")
    assert "red" in _line_style("  refused by PPO Deck's engine (2):")
    assert _line_style("  refused by PPO Deck's engine (0): -") == "dim"
    assert _line_style("import report: run.sh") == "bold"
    assert _line_style("    --use-opsm: not implemented") == ""


async def test_a_python_launcher_path_with_its_options_imports_as_python(
        tui_env: Path) -> None:
    launcher = Path(__file__).parents[1] / "config" / "launchers" / "prepare_steps.py"
    app = PPODeckApp()
    async with app.run_test(size=(140, 44)) as pilot:
        screen = await _import(pilot, app, name=f"{launcher} --model-nme Qwen3-1.7B")
        assert "could not import: --model-nme is not a field of the launcher's ScriptArgs" in str(
            screen.query_one("#paste-report").render())
        screen.query_one("#paste-name", Input).value = f"{launcher} --model-name Qwen3-1.7B"
        await pilot.press("ctrl+y")
        await pilot.pause()
        report = screen.imported
        assert report is not None and report.language == "python"
        assert report.config.get("hf_checkpoint") == "/cache/models/Qwen3-1.7B"  # the option
        assert "read as a Python launcher" in str(screen.query_one("#paste-report").render())
        await pilot.click("#open")
        await wait_until(pilot, lambda: isinstance(app.screen, EditScreen))
        saved = app.screen._toml("from-launcher", "", "")
    assert 'hf-checkpoint = "Qwen/Qwen3-1.7B"' in saved  # [provenance.sources], for prepare
    assert "prepare_steps.py:" in saved  # each flag's line


def _cli_counts_all(script: str) -> tuple[int, int, int]:
    import re

    from typer.testing import CliRunner

    from ppodeck.app.cli.root import app as cli

    Path("pasted.sh").write_text(script)
    out = CliRunner().invoke(cli, ["validate", "--from-command", "pasted.sh"]).stdout
    found = re.search(r"\((\d+) errors?, (\d+) warnings?, (\d+) infos?\)", out)
    assert found, out
    return int(found.group(1)), int(found.group(2)), int(found.group(3))


async def test_knock_ons_fold_under_their_cause_counted_as_validate_counts(
        tui_env: Path) -> None:
    """A refused value's knock-ons are one folded row (▸) in the dialog and the Issues panel;
    enter unfolds them (▾); the counts are validate --from-command's, in both."""
    script = SCRIPT.replace("--advantage-estimator ppo", "--advantage-estimator ppo "
                            "--num-rollout ten --lr-decay-style linear")
    errors, warnings, infos = _cli_counts_all(script)
    app = PPODeckApp()
    async with app.run_test(size=(140, 44)) as pilot:
        screen = await _import(pilot, app, script)
        report = str(screen.query_one("#paste-report").render())
        assert (f"issues ({errors} error{'s' * (errors != 1)}, {warnings} warning"
                f"{'s' * (warnings != 1)}, {infos} info{'s' * (infos != 1)})") in report
        assert "▸ info input.knock_on" in report
        editor, panel = await _open_in_editor(pilot, app)
        assert (panel.counts["error"], panel.counts["warning"], panel.counts["info"]) == (
            errors, warnings, infos)
        [summary] = [i for i in panel.issues if i.knock_ons]
        assert {i.code for i in summary.knock_ons} >= {"data.num_rollout_required"}
        assert all(i.code != "data.num_rollout_required" for i in panel.issues)
        row = panel.rows.index(summary)
        assert str(panel.get_option_at_index(row).prompt).startswith("▸")
        rows = len(panel.rows)
        from ppodeck.app.tui.widgets.view_tabs import ViewTabs

        editor.query_one(ViewTabs).active = "issues"
        await wait_until(pilot, lambda: panel.display and panel.region.height > 0, timeout=15)
        panel.focus()
        await wait_until(pilot, lambda: panel.has_focus)
        await wait_until(pilot, lambda: "num_rollout" in editor.parse_errors,  # "ten" mounted
                         timeout=30)
        assert (panel.counts["error"], panel.counts["warning"], panel.counts["info"]) == (
            errors, warnings, infos)  # the field's parse error is the refusal, not one more
        rows, row = len(panel.rows), panel.rows.index(summary)
        panel.highlighted = row
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(panel.rows) == rows + len(summary.knock_ons))
        assert str(panel.get_option_at_index(row).prompt).startswith("▾")
        assert panel.counts["error"] == errors  # unfolding shows them, it does not count them
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(panel.rows) == rows)


async def test_an_unreadable_paste_is_one_error_until_its_config_is_edited(
        tui_env: Path) -> None:
    app = PPODeckApp()
    async with app.run_test(size=(140, 44)) as pilot:
        screen = await _import(pilot, app, "echo hi\n")
        report = str(screen.query_one("#paste-report").render())
        assert "issues (1 error, 0 warnings, 1 info)" in report
        assert "command.no_train_command" in report
        editor, panel = await _open_in_editor(pilot, app)
        assert [i.code for i in panel.issues] == ["command.no_train_command", "input.knock_on"]
        editor.config = editor.config.with_values(num_rollout=3)
        editor._revalidate()
        assert "model.shape_required" in {i.code for i in panel.issues}  # judged as it is
