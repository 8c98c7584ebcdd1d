"""The Samples view (monitor `a`): the table of a rollout's samples, the token pane and its
strips, rollouts picked and followed live, and what a run without samples shows."""

from __future__ import annotations

from pathlib import Path

from ppodeck.app.tui.app import PPODeckApp
from ppodeck.app.tui.screens.monitor import MonitorScreen
from ppodeck.app.tui.screens.samples import SamplesScreen
from ppodeck.app.tui.widgets.sample_pane import SamplePane, colour, scale_of, strip_values
from ppodeck.app.tui.widgets.samples_table import SamplesTable
from ppodeck.engine.run.samples import read_samples, write_rollout
from tests.fixtures.make_samples import make_record, write_run
from tests.tui.conftest import wait_until

SIZE = (160, 48)


async def open_samples(pilot, app) -> SamplesScreen:  # noqa: ANN001
    await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen))
    await pilot.press("a")
    await wait_until(pilot, lambda: isinstance(app.screen, SamplesScreen)
                     and app.screen.loaded is not None)
    await pilot.pause()
    return app.screen


async def test_the_latest_rollout_opens_with_its_samples_and_token_numbers(
        recorded_run: Path) -> None:
    write_run(recorded_run, rollouts=3, samples=16)
    app = PPODeckApp(attach=str(recorded_run))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_samples(pilot, app)
        assert screen.loaded == 2 and screen.following
        table = screen.query_one(SamplesTable)
        assert table.row_count == 16 and [r.index for r in table.shown] == list(range(16))
        title = str(screen.query_one("#samples-title").render())
        assert "rollout 2 of 0-2" in title and "16 samples" in title

        pane = screen.query_one(SamplePane)
        record = read_samples(recorded_run, 2)[0]
        assert pane.record == record
        shown = str(pane.render_sample())
        assert record.prompt in shown and "strip advantage (raw)" in shown
        assert f"token 1/{record.response_length}" in shown
        await pilot.press("tab")  # focus leaves the table for the pane
        assert app.focused is pane
        await pilot.press("right", "right")
        assert pane.cursor == 2
        assert f"adv {record.advantages[2]:+.4g}" in str(pane.render_sample())
        await pilot.press("c")  # the strip after advantage: value
        assert screen.strip == pane.strip == "value"


async def test_rollouts_are_picked_sorted_and_followed_live(recorded_run: Path) -> None:
    write_run(recorded_run, rollouts=2, samples=12)
    app = PPODeckApp(attach=str(recorded_run))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_samples(pilot, app)
        await pilot.press("left_square_bracket")
        await wait_until(pilot, lambda: screen.loaded == 0)
        assert not screen.following
        await pilot.press("o")  # index -> reward
        table = screen.query_one(SamplesTable)
        rewards = [r.reward for r in table.shown]
        assert screen.sort == "reward" and rewards == sorted(rewards, reverse=True)

        write_rollout(recorded_run, 2, [make_record(2, 0, __import__("random").Random(1))])
        await wait_until(pilot, lambda: screen.rollouts == [0, 1, 2], timeout=3)
        assert screen.loaded == 0  # not following: it stays where the user went
        await pilot.press("l")
        await wait_until(pilot, lambda: screen.loaded == 2)
        assert table.row_count == 1


async def test_a_run_without_samples_says_so_and_grpo_has_no_value_strip(
        recorded_run: Path) -> None:
    app = PPODeckApp(attach=str(recorded_run))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen))
        await pilot.press("a")
        await wait_until(pilot, lambda: isinstance(app.screen, SamplesScreen))
        await pilot.pause()
        assert "none yet" in str(app.screen.query_one("#samples-title").render())
        write_run(recorded_run, rollouts=1, samples=4, critic=False)  # appears: followed
        await wait_until(pilot, lambda: app.screen.loaded == 0, timeout=3)
        await pilot.press("c")
        shown = str(app.screen.query_one(SamplePane).render_sample())
        assert "strip value: not kept for this sample" in shown


def test_strips_and_colours() -> None:
    import random

    record = make_record(0, 1, random.Random(3))
    gap = strip_values(record, "gap")
    assert gap == [a - b for a, b in zip(record.log_probs, record.rollout_log_probs,
                                         strict=True)]
    assert strip_values(record, "return") == record.returns
    scale = scale_of([-2.0, 1.0, None])
    assert scale == 2.0
    assert colour(-2.0, scale, signed=True).triplet.red > colour(2.0, scale, True).triplet.red
    assert colour(None, scale, True) is None


async def test_a_health_finding_opens_the_samples_behind_it(recorded_run: Path) -> None:
    write_run(recorded_run, rollouts=3, samples=12)
    app = PPODeckApp(attach=str(recorded_run))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, MonitorScreen)
                         and app.screen.tail_ended is not None)
        await pilot.press("f")  # the recorded run fired nothing: said, nothing opens
        await pilot.pause()
        assert isinstance(app.screen, MonitorScreen)
        app.screen.state.health.append({"code": "health.logprob_gap_climbing", "rollout_id": 1,
                                        "level": "warning"})
        await pilot.press("f")
        await wait_until(pilot, lambda: isinstance(app.screen, SamplesScreen)
                         and app.screen.loaded == 1)
        await pilot.pause()
        screen = app.screen
        assert (screen.sort, screen.strip, screen.following) == ("gap", "gap", False)
        gaps = [r.max_gap for r in screen.query_one(SamplesTable).shown]
        assert gaps == sorted(gaps, reverse=True)
        assert screen.query_one(SamplePane).record.max_gap == gaps[0]
        title = str(screen.query_one("#samples-title").render())
        assert "health.logprob_gap_climbing at rollout 1: the largest" in title


def test_word_level_tokens_are_shown_apart() -> None:
    import random
    from dataclasses import replace

    from ppodeck.app.tui.widgets.sample_pane import token_joiner

    bpe = make_record(0, 1, random.Random(3))  # " the" style texts: their own spaces
    assert token_joiner(bpe) == ""
    words = replace(bpe, tokens=[t.strip() or t for t in bpe.tokens[:-1]] + ["\n"])
    assert token_joiner(words) == " "
