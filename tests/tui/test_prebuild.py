"""The editor built while the picker rests (app/tui/prebuild.py), and the flag groups that
open without restyling their fields (widgets/flag_group.py): both lean on Textual internals
(textual is pinned), so a Textual upgrade that drops them fails here, by name."""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import Collapsible
from textual.widgets._collapsible import CollapsibleTitle

from ppodeck.app.tui import prebuild
from ppodeck.app.tui.app import PPODeckApp
from ppodeck.app.tui.screens.edit import EditScreen, matching_dests
from ppodeck.app.tui.screens.presets import PresetPickerScreen
from ppodeck.app.tui.widgets.flag_group import FlagGroup
from tests.tui.conftest import wait_until

SIZE = (120, 36)


def test_the_textual_hooks_are_there() -> None:
    assert prebuild.available(PPODeckApp())
    assert callable(getattr(Screen, "_refresh_layout", None))
    # FlagGroup overrides these two; were they renamed, it would quietly go slow again
    assert callable(getattr(Collapsible, "_update_collapsed", None))
    assert callable(getattr(CollapsibleTitle, "_update_label", None))


async def test_enter_shows_the_editor_built_while_the_picker_rested() -> None:
    app = PPODeckApp()
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, PresetPickerScreen))
        picker = app.screen
        first = picker.selected
        assert first is not None
        await wait_until(pilot, lambda: app.prebuilt is not None, timeout=10)
        assert app.prebuilt is not None
        name, built, _ = app.prebuilt
        assert name == first.name and not built.is_current
        await wait_until(pilot, lambda: built.laid_out_ahead, timeout=10)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, EditScreen))
        assert app.screen is built and app.prebuilt is None
        await wait_until(pilot, lambda: app.focused is built.query_one("#flag-search"))


async def test_moving_on_drops_the_built_editor_and_builds_the_next() -> None:
    app = PPODeckApp()
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, PresetPickerScreen))
        picker = app.screen
        await wait_until(pilot, lambda: app.prebuilt is not None, timeout=10)
        assert app.prebuilt is not None
        old = app.prebuilt[1]
        await pilot.press("down")
        second = picker.selected
        assert second is not None
        await wait_until(pilot, lambda: app.prebuilt is not None
                         and app.prebuilt[0] == second.name, timeout=10)
        await wait_until(pilot, lambda: not old.is_attached)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, EditScreen))
        assert app.screen.preset is not None and app.screen.preset.name == second.name


async def test_a_changed_draft_makes_enter_build_afresh() -> None:
    from ppodeck.app.tui import drafts

    app = PPODeckApp()
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, PresetPickerScreen))
        await wait_until(pilot, lambda: app.prebuilt is not None, timeout=10)
        assert app.prebuilt is not None
        name, built, _ = app.prebuilt
        drafts.write_draft(built.preset_name, f'name = "{built.preset_name}"\n[flags]\n'
                           'num-rollout = 7\n')
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, EditScreen))
        assert app.screen is not built
        assert app.screen.config.get("num_rollout") == 7


async def test_a_search_opens_groups_with_only_the_matching_fields_in_order() -> None:
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, EditScreen))
        screen = app.screen
        # checkpoint: 17 flags, 2 of them match (a small group: this test runs on busy CI)
        model = screen.query_one("#group-checkpoint", FlagGroup)
        assert model.collapsed and not model.fields
        await pilot.press("ctrl+f", *"no-save")
        await wait_until(pilot, lambda: not model.collapsed and model.fields)
        assert "-collapsed" not in model.classes  # opened inline, no restyle
        summary = screen.query_one("#search-summary")
        assert summary.display and "match in" in str(summary.render())
        hits = matching_dests("no-save")
        shown = {dest for dest, field in model.fields.items() if field.display}
        assert shown and shown == {flag.dest for flag in model.flags if flag.dest in hits}
        assert len(model.fields) < len(model.flags)  # the rest is not mounted
        # cleared, the search closes the groups it opened; opened again, a group mounts the
        # rest of its fields, each in its schema place
        await pilot.press("ctrl+f", "backspace")
        await wait_until(pilot, lambda: model.collapsed)
        model.collapsed = False
        await wait_until(pilot, lambda: len(model.fields) == len(model.flags)
                         and not model.mounting, timeout=10)
        await wait_until(pilot, lambda: all(f.parent is not None for f in model.fields.values()))
        contents = model.query_one(Collapsible.Contents)
        order = [child.id for child in contents.children]
        assert order == [f"field-{flag.dest}" for flag in model.flags]
        assert not summary.display


async def test_a_search_with_no_match_says_so() -> None:
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, EditScreen))
        screen = app.screen
        await pilot.press("ctrl+f", *"zzqqxx")
        note = screen.query_one("#no-match")
        await wait_until(pilot, lambda: note.display)
        assert "No flag matches 'zzqqxx'" in str(note.render())
        assert not any(group.display for group in screen.groups)
