"""No key lost in a dialog, in a real terminal: `ppodeck` on a pseudo-terminal, each dialog
opened by its key with what is typed into it in the same write (one burst: the dialog is not
on screen yet when the keys arrive), read back from the files the dialog writes and from the
screen. The import: a burst into the paste box, and Esc on the imported config keeps the edits
(a draft on disk) after asking. Pilot cannot see these races: it waits for idle between keys.
"""

from __future__ import annotations

import os
from pathlib import Path

from .pty_app import PtyApp
from .test_pty_keys import wait_for_file_text

TREE = Path(__file__).resolve().parents[2]


def open_editor(app: PtyApp) -> None:
    """tui-ppo (the team preset of conftest.py) in the editor, its fields on screen."""
    app.wait_for(r"Choose a preset")
    app.write("tui-ppo", "enter")
    app.wait_for(r"--critic-lr")


def test_save_and_export_dialogs_take_a_burst_whole(tui_env: Path) -> None:
    exported = tui_env / "exported-burst.sh"
    app = PtyApp(TREE, dict(os.environ))
    try:
        open_editor(app)
        # ctrl+s, then the name (replacing the selected default), tab, the description, enter
        app.write("ctrl+s", "fast-critic-burst", "tab", "typed in one burst", "enter")
        saved = wait_for_file_text(tui_env / "config" / "presets" / "fast-critic-burst.toml",
                                   "typed in one burst")
        assert 'name = "fast-critic-burst"' in saved
        app.write("ctrl+t", str(exported), "enter")
        assert "--critic-lr" in wait_for_file_text(exported, "--num-rollout")
        app.write("ctrl+q")
        assert app.exit_code() == 0
    finally:
        app.close()


def test_launch_dialog_takes_a_burst_whole(tui_env: Path) -> None:
    app = PtyApp(TREE, dict(os.environ))
    try:
        open_editor(app)
        app.set_mark()
        # the dialog focuses Launch; tab goes to the address field
        app.write("ctrl+l", "tab", "http://ray-head-burst-7:8265")
        app.wait_for(r"Run directory \(created on confirm\)")
        # the field is narrower than the address: its end shows, then (home) its start
        app.wait_for(r"ttp://ray-head-burst-7:8265")
        app.set_mark()
        app.write("home")
        app.wait_for(r"http://ray-head-burst-7:82")
        app.set_mark()
        app.write("escape")  # cancel: nothing is launched
        app.wait_for(r"Save as preset")
        assert not any((tui_env / "runs").iterdir())
        app.write("ctrl+q")
        assert app.exit_code() == 0
    finally:
        app.close()


COMMAND = ("python3 train.py --advantage-estimator ppo --num-rollout 7 --rollout-batch-size 16 "
           "--n-samples-per-prompt 4 --global-batch-size 32")


def test_import_takes_a_burst_and_esc_keeps_the_draft(tui_env: Path) -> None:
    draft = tui_env / "state" / "drafts" / "pasted.toml"
    app = PtyApp(TREE, dict(os.environ))
    try:
        app.wait_for(r"Choose a preset")
        app.write("ctrl+g", COMMAND)  # typed while the import dialog opens
        app.wait_for(r"Import a miles command")
        app.wait_for(r"--global-batch-size 32")
        app.set_mark()
        app.write("ctrl+y")
        app.wait_for(r"Open in editor")
        app.write("enter")  # the import report's Open in editor
        app.wait_for(r"Save as preset")
        # an edit in the imported config, in one burst: num-rollout 7 -> 9
        app.write("ctrl+f", "num-rollout", "enter", "backspace", "9")
        assert "num-rollout = 9" in wait_for_file_text(draft, "num-rollout = 9")
        app.set_mark()
        app.write("escape")  # an import saved nowhere: Esc asks first
        app.wait_for(r"Discard the imported config\?")
        app.set_mark()
        app.write("escape")  # no: the editor stays, and so do the edits
        app.wait_for(r"Save as preset")
        assert "num-rollout = 9" in draft.read_text()
        app.write("ctrl+q")
        assert app.exit_code() == 0
        assert "num-rollout = 9" in draft.read_text()  # kept when the app closes, too
    finally:
        app.close()
