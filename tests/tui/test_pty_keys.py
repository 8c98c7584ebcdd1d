"""No key lost, in a real terminal: `ppodeck` started as a process on a pseudo-terminal, keys
written to it before its first frame, as one burst, and slowly; what the keys did is read back
from the draft the editor keeps on disk and from the screen. Pilot tests cannot see these
races: Pilot waits for the app to go idle between keys.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from .conftest import TEAM_PRESET
from .pty_app import PtyApp

TREE = Path(__file__).resolve().parents[2]
DRAFT_WAIT_S = 60.0  # a loaded CI machine; every wait ends as soon as its condition holds


def wait_for_file_text(path: Path, needle: str, timeout: float = DRAFT_WAIT_S) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text() if path.is_file() else ""
        if needle in text:
            return text
        time.sleep(0.05)
    raise AssertionError(f"{path} never held {needle!r}; it holds:\n"
                         f"{path.read_text() if path.is_file() else '(no file)'}")


@pytest.fixture
def clashing_team(tui_env: Path) -> Path:
    """A teammate's copy of tui-ppo under another file name: it must not take the app down."""
    (tui_env / "team" / "team-copy.toml").write_text(TEAM_PRESET.replace(
        'description = "Tiny PPO', 'description = "A teammate copy of tiny PPO'))
    (tui_env / "team" / "broken.toml").write_text(
        'name = "broken"\ncolour = 1\n[flags]\nlr = "x"\n')
    return tui_env


def test_typed_ahead_and_bursts_reach_the_right_fields(clashing_team: Path) -> None:
    app = PtyApp(TREE, dict(os.environ))
    try:
        app.write("tui-ppo")  # typed before the first frame
        app.wait_for(r"Choose a preset")
        # one write: Enter opens the editor, the rest is typed while it is still opening
        app.write("enter", "eps-clip", "enter", "0.25", *["backspace"] * 4, "0.3",
                  "ctrl+f", "num-rollout", "enter", "backspace", "4.5")
        drafts = clashing_team / "state" / "drafts"
        text = wait_for_file_text(drafts / "tui-ppo.typed.json", "4.5")
        assert json.loads(text) == {"--num-rollout": "64.5"}  # as typed, never rewritten
        draft = wait_for_file_text(drafts / "tui-ppo.toml", "eps-clip = 0.3")
        assert "num-rollout = 60\n" in draft  # the preset's value while the text does not parse
        app.set_mark()
        app.write("ctrl+q")
        assert app.exit_code() == 0
    finally:
        app.close()


def test_slow_typing_keeps_the_first_key(clashing_team: Path) -> None:
    app = PtyApp(TREE, dict(os.environ))
    try:
        app.wait_for(r"Choose a preset")
        app.wait_for(r"broken")  # the bad file is listed, not fatal
        app.type_slowly("tuippo", 0.35)  # fuzzy: matches tui-ppo; text no row contains
        app.wait_for(r"tuippo")
        app.write("ctrl+q")
        assert app.exit_code() == 0
    finally:
        app.close()


CRASHING_PICKER = """
import sys
sys.argv[0] = "ppodeck"
from ppodeck.app.tui.screens.presets import PresetPickerScreen
def broken_mount(self):
    raise RuntimeError("picker exploded on purpose")
PresetPickerScreen.on_mount = broken_mount
from ppodeck.app.tui.entry import main
sys.exit(main())
"""


def test_an_internal_error_exits_non_zero_and_names_the_crash_log(tui_env: Path) -> None:
    app = PtyApp(TREE, dict(os.environ), code=CRASHING_PICKER)
    try:
        assert app.exit_code() == 1
        app.wait_for(r"internal error")
        log = tui_env / "state" / "crash.log"
        app.wait_for(re.escape(f"Details: {log}."))  # whole: a copied path must work
        assert "picker exploded on purpose" in log.read_text()
    finally:
        app.close()
