"""The launch dialog says its keys, and Tab then Enter launches (issue #16's new-user report)."""

from __future__ import annotations

from textual.app import App
from textual.widgets import Button, Footer

from ppodeck.app.tui.screens.confirm import LaunchChoice, LaunchDialog


class DialogHost(App):
    def __init__(self) -> None:
        super().__init__()
        self.result: object = None

    def on_mount(self) -> None:
        self.push_screen(LaunchDialog("Launch tiny-cpu?", "python3 train.py ..."),
                         lambda result: setattr(self, "result", result))


async def test_the_launch_dialog_shows_its_keys() -> None:
    app = DialogHost()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        dialog = app.screen
        assert str(dialog.query_one("#confirm", Button).label) == "Launch (ctrl+y)"
        assert str(dialog.query_one("#cancel", Button).label) == "Cancel (esc)"
        assert dialog.query(Footer)  # the footer lists the dialog's bindings, not the editor's


async def test_tab_then_enter_launches() -> None:
    app = DialogHost()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        await pilot.press("tab")  # from Launch to the address field
        await pilot.press("enter")
        await pilot.pause()
        assert app.result == LaunchChoice(submit="")


async def test_ctrl_y_launches_with_the_typed_address() -> None:
    app = DialogHost()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        app.screen.query_one("#submit-address").value = "http://head:8265"
        await pilot.press("ctrl+y")
        await pilot.pause()
        assert app.result == LaunchChoice(submit="http://head:8265")
