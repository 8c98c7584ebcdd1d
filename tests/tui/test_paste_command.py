"""The TUI's paste: a miles launch script becomes an import report, then the flag editor."""

from __future__ import annotations

from app.tui.app import PPODeckApp
from app.tui.screens.edit import EditScreen
from app.tui.screens.paste import PasteCommandScreen
from app.tui.screens.presets import PresetPickerScreen
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


async def test_pasting_a_script_shows_the_report_then_opens_the_editor() -> None:
    app = PPODeckApp()
    async with app.run_test(size=(140, 44)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, PresetPickerScreen))
        await pilot.press("i")
        await wait_until(pilot, lambda: isinstance(app.screen, PasteCommandScreen))
        screen = app.screen
        screen.query_one("#paste-text").load_text(SCRIPT)
        await pilot.press("ctrl+y")
        await pilot.pause()
        report = str(screen.query_one("#paste-report").render())
        assert "resolved (" in report and "$MODEL_ARGS" in report
        assert "${DATA_DIR} is not defined" in report and "<pasted>:8" in report  # unresolved
        assert "--balance-data" in report  # command-only
        assert "--use-opsm" in report  # refused, with the reason
        await pilot.click("#open")
        await wait_until(pilot, lambda: isinstance(app.screen, EditScreen))
        editor = app.screen
        assert editor.preset_name == "pasted"
        assert editor.config.get("num_layers") == 2
        assert editor.config.get("n_samples_per_prompt") == 4


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
