"""Pilot tests of the preset picker -> flag editor flow: validation, save, export, drafts."""

from __future__ import annotations

from pathlib import Path

from textual.fuzzy import Matcher
from textual.widgets import Button, Input, Select, Static

from ppodeck.app.tui import drafts
from ppodeck.app.tui.app import PPODeckApp
from ppodeck.app.tui.screens.edit import EditScreen, flag_matches, in_order
from ppodeck.app.tui.screens.presets import PresetPickerScreen
from ppodeck.app.tui.widgets.command_preview import CommandPreview
from ppodeck.app.tui.widgets.derived_panel import DerivedPanel
from ppodeck.app.tui.widgets.flag_group import FlagGroup
from ppodeck.app.tui.widgets.issues_panel import IssuesPanel
from ppodeck.engine.config import BY_DEST, FLAGS
from ppodeck.engine.presets import config_from_toml, load_preset, resolve_preset, user_preset_dir
from tests.tui.conftest import wait_until

SIZE = (120, 36)


async def open_editor(pilot, dest: str = "kl_coef") -> EditScreen:
    app = pilot.app
    await wait_until(pilot, lambda: isinstance(app.screen, EditScreen))
    screen = app.screen
    # a group mounts its fields a few per refresh: wait for every field of the open groups
    await wait_until(pilot, lambda: dest in screen.fields() and all(
        field.query(".flag-control") for field in screen.fields().values()))
    return screen


async def type_into(pilot, screen: EditScreen, dest: str, text: str) -> None:
    """Focus the flag's input, clear it and type `text` key by key."""
    screen.focus_flag(dest)
    field = screen.fields()[dest]
    await wait_until(pilot, lambda: pilot.app.focused is field.control)
    field.control.value = ""
    await pilot.pause()
    await pilot.press(*text)
    await pilot.pause()


async def test_choosing_a_preset_fills_the_editor() -> None:
    app = PPODeckApp()
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, PresetPickerScreen))
        picker = app.screen
        sources = {p.name: p.source for p in picker.presets}
        assert sources["tui-ppo"] == "team" and sources["qwen3-4b-ppo"] == "built-in"
        await pilot.press("t", "u", "i")  # the search box has the keys
        assert [p.name for p in picker.shown][0] == "tui-ppo"
        await pilot.press("enter")
        screen = await open_editor(pilot, "advantage_estimator")
        assert screen.preset is not None and screen.preset.name == "tui-ppo"
        expected = resolve_preset(load_preset("tui-ppo"))
        assert dict(screen.config.values) == dict(expected.values)
        fields = screen.fields()
        assert fields["advantage_estimator"].control.value == "ppo"
        assert fields["num_critic_only_steps"].control.value == "1"
        assert not fields["num_critic_only_steps"].changed
        # derived values and the command preview come from the same config
        derived = screen.query_one(DerivedPanel).derived
        assert derived is not None and derived.world_size == 1
        assert derived.actor_steps_per_rollout == 2
        argv = screen.query_one(CommandPreview).argv
        assert argv[argv.index("--advantage-estimator") + 1] == "ppo"


async def test_kl_coef_error_shows_on_field_and_panel_and_blocks_launch() -> None:
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot)
        launch = screen.query_one("#launch", Button)
        assert not launch.disabled
        await type_into(pilot, screen, "kl_coef", "0.1")
        field = screen.fields()["kl_coef"]
        assert field.issue is not None and field.issue.level == "error"
        assert "--kl-coef" in field.issue.message
        assert field.level == "error" and field.changed
        panel = screen.query_one(IssuesPanel)
        [ppo_error] = [i for i in panel.issues if i.code == "ppo.kl_coef_nonzero"]
        assert ppo_error.level == "error" and ppo_error.flags == ("--kl-coef",)
        assert ppo_error.fix and field.issue.message == ppo_error.message
        assert launch.disabled
        # clearing the field unsets the flag (kl-coef defaults to 0): Launch comes back
        field.control.value = ""
        await pilot.pause()
        assert field.issue is None or field.issue.level != "error"
        assert not [i for i in panel.issues if i.level == "error"]
        assert not launch.disabled


async def test_each_keystroke_revalidates() -> None:
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot)
        await type_into(pilot, screen, "kl_coef", "0")
        assert screen.error_count == 0
        await pilot.press(".")  # "0." still parses as 0.0
        await pilot.pause()
        assert screen.error_count == 0
        await pilot.press("5")  # "0.5": the PPO rule fires on this keystroke
        await pilot.pause()
        assert "ppo.kl_coef_nonzero" in screen.report.codes("error")
        await pilot.press("backspace", "backspace")
        await pilot.pause()
        assert screen.error_count == 0


async def test_a_value_that_does_not_parse_is_an_error_until_fixed() -> None:
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot)
        screen.query_one("#group-ppodeck").collapsed = False
        await wait_until(pilot, lambda: "max_prompt_len" in screen.fields())
        field = screen.fields()["max_prompt_len"]
        field.control.value = "12x"  # pasted text bypasses the integer key filter
        await pilot.pause()
        assert "max_prompt_len" in screen.parse_errors
        assert field.issue is not None and field.issue.level == "error"
        assert screen.query_one("#launch", Button).disabled
        assert any(i.code == "parse" for i in screen.query_one(IssuesPanel).issues)
        field.control.value = "12"
        await pilot.pause()
        assert not screen.parse_errors and screen.config.get("max_prompt_len") == 12


async def test_selecting_an_issue_focuses_its_field() -> None:
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot)
        await type_into(pilot, screen, "kl_coef", "0.2")
        panel = screen.query_one(IssuesPanel)
        index = next(i for i, issue in enumerate(panel.issues) if issue.level == "error")
        screen.query_one("#flag-search", Input).focus()
        panel.focus()
        panel.highlighted = index
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.focused is screen.fields()["kl_coef"].control)


async def test_reset_button_restores_the_preset_value() -> None:
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot, "critic_lr")
        await type_into(pilot, screen, "critic_lr", "0.5")
        field = screen.fields()["critic_lr"]
        assert field.changed and screen.config.get("critic_lr") == 0.5
        await pilot.click(field.query_one(".flag-reset"))
        await pilot.pause()
        assert not field.changed
        assert screen.config.get("critic_lr") == 0.002 and field.control.value == "0.002"


async def test_switch_and_select_fields_change_the_config() -> None:
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot, "normalize_advantages")
        fields = screen.fields()
        fields["normalize_advantages"].control.value = False
        fields["advantage_estimator"].control.value = "grpo"
        # each change arrives as a message: wait for it (one pause is not enough on a busy host)
        await wait_until(pilot, lambda: screen.config.get("normalize_advantages") is False
                         and screen.config.get("advantage_estimator") == "grpo")
        assert fields["advantage_estimator"].changed
        fields["advantage_estimator"].control.value = Select.NULL  # unset: schema default
        await wait_until(pilot, lambda: not screen.config.is_set("advantage_estimator"))


async def test_search_finds_flags_by_name_and_help() -> None:
    assert flag_matches(BY_DEST["kl_coef"], "klcoef")
    assert flag_matches(BY_DEST["num_critic_only_steps"], "value warmup")
    assert not flag_matches(BY_DEST["lr"], "value warmup")
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot)
        await pilot.press("ctrl+f")
        await pilot.press(*"critic-only")
        await wait_until(pilot, lambda: not screen.query_one("#group-model").display)
        visible = [d for d, f in screen.fields().items() if f.display]
        assert "num_critic_only_steps" in visible and "kl_coef" not in visible
        hidden_groups = [g.group for g in screen.groups if not g.display]
        assert "model" in hidden_groups and "critic" not in hidden_groups


def test_names_match_as_textuals_fuzzy_matcher_matches_them() -> None:
    """edit.in_order stands for Matcher(query).match(name) > 0: the same names, every flag."""
    names = [flag.name[2:].lower() for flag in FLAGS]
    for query in ("e", "ep", "eps-c", "eps-clip", "klcoef", "ppo", "ee", "a b", "--", "zq",
                  "rollout", "critic lr", "lrdecay", "num-gpus"):
        matcher = Matcher(query)
        assert [n for n in names if in_order(query, n)] == [
            n for n in names if matcher.match(n) > 0], query


async def test_save_as_preset_round_trips(tui_env: Path) -> None:
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot, "critic_lr")
        await type_into(pilot, screen, "critic_lr", "0.004")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: app.screen.id == "save-dialog")
        dialog = app.screen
        dialog.query_one("#name", Input).value = "tiny-fast-critic"
        dialog.query_one("#description", Input).value = "faster critic"
        await pilot.click("#confirm")
        await wait_until(pilot, lambda: app.screen is screen)
        saved_path = user_preset_dir() / "tiny-fast-critic.toml"
        assert saved_path.is_file()
        saved = load_preset("tiny-fast-critic")
        assert saved.source == "user" and saved.description == "faster critic"
        assert dict(resolve_preset(saved).values) == dict(screen.config.values)
        assert screen.preset_name == "tiny-fast-critic" and not screen.fields()["critic_lr"].changed
        assert not drafts.has_draft("tui-ppo")


async def test_export_round_trips_toml_and_command(tui_env: Path) -> None:
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot, "critic_lr")
        await type_into(pilot, screen, "critic_lr", "0.003")
        for name in ("exported.toml", "exported.sh"):
            await pilot.press("ctrl+t")
            await wait_until(pilot, lambda: app.screen.id == "export-dialog")
            app.screen.query_one("#path", Input).value = str(tui_env / name)
            await pilot.click("#confirm")
            await wait_until(pilot, lambda: app.screen is screen)
        text = (tui_env / "exported.toml").read_text()
        assert dict(config_from_toml(text, tui_env / "exported.toml").values) == dict(
            screen.config.values)
        command = (tui_env / "exported.sh").read_text()
        assert "--critic-lr 0.003" in command and "--advantage-estimator ppo" in command


async def test_a_draft_survives_a_restart() -> None:
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot, "critic_lr")
        await type_into(pilot, screen, "critic_lr", "0.007")
        await wait_until(pilot, lambda: drafts.has_draft("tui-ppo"))  # debounced write
    assert "critic-lr = 0.007" in (drafts.read_draft("tui-ppo") or "")
    restarted = PPODeckApp(preset="tui-ppo")
    async with restarted.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot, "critic_lr")
        assert screen.restored_draft
        assert screen.config.get("critic_lr") == 0.007
        field = screen.fields()["critic_lr"]
        assert field.control.value == "0.007" and field.changed
        # going back to the preset's values removes the draft
        screen.action_revert_all()
        await wait_until(pilot, lambda: not drafts.has_draft("tui-ppo"))
        assert field.control.value == "0.002"


async def test_launch_confirms_argv_and_run_dir_then_starts_the_driver(
        tui_env: Path, monkeypatch) -> None:
    import ppodeck.app.tui.screens.edit  # noqa: F401  (the module whose worker calls engine.launch.local)
    import ppodeck.engine.launch.local as launch

    started: list[Path] = []

    def fake_start(rundir, env=None):
        started.append(rundir.path)
        return None

    monkeypatch.setattr(launch, "start_driver", fake_start)
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        await open_editor(pilot)
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: app.screen.id == "confirm-launch")
        body = str(app.screen.query_one("#dialog-text").render())
        assert "--advantage-estimator ppo" in body and str(tui_env / "runs") in body
        await pilot.click("#confirm")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "MonitorScreen")
        assert len(started) == 1 and (started[0] / "config.toml").is_file()
        assert app.screen.run_dir == started[0]



async def test_launch_lists_the_code_a_config_would_run_in_the_confirm_dialog() -> None:
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot)
        screen.config = screen.config.with_values(custom_rm_path="team.rewards:score")
        screen.action_launch()
        await wait_until(pilot, lambda: bool(app.screen.query("#dialog-text")))
        text = str(app.screen.query_one("#dialog-text", Static).render())
        assert "will execute code" in text and "--custom-rm-path team.rewards:score" in text


async def test_launch_refuses_missing_inputs_before_anything_starts() -> None:
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot)
        screen.config = screen.config.with_values(prompt_data="/nope/data.jsonl",
                                                  synthetic_task=None)
        screen.action_launch()
        await pilot.pause()
        assert app.screen is screen  # no confirm dialog, nothing prepared or started
        assert any("/nope/data.jsonl" in str(n.message) for n in app._notifications)


async def test_the_launch_dialog_can_submit_to_a_ray_cluster(tui_env: Path, monkeypatch) -> None:
    import ppodeck.engine.launch.jobs as jobs

    submitted: list[tuple[Path, str, str]] = []

    def fake_submit(rundir, preset_name, address, env=None):
        submitted.append((rundir.path, preset_name, address))
        return None

    monkeypatch.setattr(jobs, "submit", fake_submit)
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        await open_editor(pilot)
        await pilot.press("ctrl+l")
        await wait_until(pilot, lambda: app.screen.id == "confirm-launch")
        app.screen.query_one("#submit-address", Input).value = "http://head:8265"
        await pilot.click("#confirm")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "MonitorScreen")
        assert [(p.parent, name, url) for p, name, url in submitted] == [
            (tui_env / "runs", "tui-ppo", "http://head:8265")]


async def test_a_resized_field_asks_for_no_second_layout() -> None:
    """A field, its name and its help are arranged in the layout that sizes them; a request
    for another layout from each of them cost a whole-screen layout more per search key and
    at the editor's first paint (flag_field.NoRelayoutOnResize)."""
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot)
        await pilot.pause()
        field = screen.fields()["kl_coef"]
        for widget in (field, field.query_one(".flag-name"), field.query_one(".flag-detail")):
            bigger = widget.outer_size.with_width(widget.outer_size.width + 1)
            assert widget._size_updated(bigger, bigger, widget.container_size)  # textual pinned
            assert widget.outer_size == bigger and widget.virtual_size == bigger
            assert not widget._layout_required, widget


async def test_typing_in_a_text_box_asks_for_no_layout() -> None:
    """Textual's Input sets its virtual width on every key, and that asked for a whole-screen
    layout per key (text_input.DeckInput); the text still scrolls to keep the cursor in view."""
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot)
        search = screen.query_one("#flag-search", Input)
        search.focus()
        await pilot.pause()
        await pilot.press("x")
        search.insert_text_at_cursor("x" * 150)  # wider than the box
        assert search.virtual_size.width == 152 and not search._layout_required  # textual pinned
        await pilot.press("y")
        assert search.value == "x" * 151 + "y" and search.cursor_position == 152
        assert search.scroll_x == search.max_scroll_x > 0


async def test_a_group_title_change_repaints_the_title_row_only() -> None:
    """A search key changes every group's title; repainting each whole group for it redrew
    every line of it (flag_group.FlagGroup.set_counts)."""
    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot)
        await pilot.pause()
        group = screen.query_one("#group-ppo", FlagGroup)
        group.set_matches(3)
        assert "3 matches" in group.title and "3 matches" in str(group._title.label)
        assert not group._repaint_required  # textual pinned
        await pilot.pause()
        assert "3 matches" in str(group._title.render())


async def test_the_collector_waits_for_a_pause_in_typing() -> None:
    """A full collection landing on a search key cost it ~0.1 s: while keys come the collector
    is off, and it runs (and is back on) once typing pauses (app.PPODeckApp.hold_collector)."""
    import gc

    from ppodeck.app.tui.app import TYPING_PAUSE_S

    app = PPODeckApp(preset="tui-ppo")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_editor(pilot)
        screen.query_one("#flag-search", Input).focus()
        await pilot.pause()
        try:
            await pilot.press("e", "p")
            assert not gc.isenabled() and app.collector_timer is not None
            await pilot.pause(TYPING_PAUSE_S / 2)
            await pilot.press("s")  # still typing: the pause starts again
            assert not gc.isenabled()
            await pilot.pause(TYPING_PAUSE_S * 3)
            assert gc.isenabled() and app.collector_timer is None
            assert screen.query_one("#flag-search", Input).value == "eps"
        finally:
            gc.enable()  # whatever happened, the collector is on for the tests after this one


async def test_quitting_while_typing_turns_the_collector_back_on() -> None:
    import gc

    app = PPODeckApp(preset="tui-ppo")
    try:
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_editor(pilot)
            screen.query_one("#flag-search", Input).focus()
            await pilot.press("e")
            assert not gc.isenabled()
        assert gc.isenabled()
    finally:
        gc.enable()
