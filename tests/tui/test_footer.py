"""DeckFooter: rebuilt when the keys it shows change, not on every bindings update."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets._footer import FooterKey

from ppodeck.app.tui.widgets.footer import DeckFooter
from tests.tui.conftest import wait_until


class KeysScreen(Screen[None]):
    BINDINGS = [Binding("s", "save", "Save"), Binding("l", "launch", "Launch")]
    launch_ready = False

    def compose(self) -> ComposeResult:
        yield DeckFooter()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return (self.launch_ready or None) if action == "launch" else True  # None: disabled


class KeysApp(App[None]):
    def on_mount(self) -> None:
        self.push_screen(KeysScreen())


def _keys(screen: Screen) -> dict[str, bool]:
    return {key.description: not key.has_class("-disabled") for key in screen.query(FooterKey)
            if key.description}


async def test_the_footer_follows_key_changes_and_skips_the_same_keys() -> None:
    app = KeysApp()
    async with app.run_test(size=(80, 10)) as pilot:
        await wait_until(pilot, lambda: _keys(app.screen) == {"Save": True, "Launch": False,
                                                             "palette": True})
        screen = app.screen
        footer = screen.query_one(DeckFooter)
        rebuilds = []
        original = footer.recompose

        async def counted() -> None:
            rebuilds.append(1)
            await original()

        footer.recompose = counted  # type: ignore[method-assign]
        for _ in range(3):  # the same keys: nothing to redraw
            screen.refresh_bindings()
            await pilot.pause()
        assert rebuilds == []
        screen.launch_ready = True  # Launch becomes enabled: the footer must say so
        screen.refresh_bindings()
        await wait_until(pilot, lambda: _keys(screen) == {"Save": True, "Launch": True,
                                                          "palette": True})
        assert rebuilds == [1]
