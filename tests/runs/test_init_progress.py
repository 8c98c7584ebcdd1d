"""`ppodeck run`'s live view names init's step under way; `tail` prints each step with its
seconds and, for a trainer, where they went."""

from __future__ import annotations

from ppodeck.app.cli.progress import RunProgress
from ppodeck.app.cli.tail import format_event


def phase(name: str, state: str, parent: str | None = None, **fields: object) -> dict:
    extra = {} if parent is None else {"parent": parent}
    return {"v": 1, "ts": 0.0, "kind": "phase", "name": name, "state": state,
            "rollout_id": None, **extra, **fields}


def test_the_live_view_names_the_init_step_under_way() -> None:
    progress = RunProgress("run", 4)
    progress.apply(phase("init", "start"))
    assert progress.phase == "init"
    progress.apply(phase("ray_start", "start", "init"))
    assert progress.phase == "init: Ray start"
    progress.apply(phase("ray_start", "end", "init", seconds=2.0))
    progress.apply(phase("rollout_start", "start", "init"))
    assert progress.phase == "init: rollout engine start" and "init: rollout" in progress.line()
    progress.apply(phase("rollout_start", "end", "init", seconds=5.0))
    progress.apply(phase("init", "end", seconds=7.5))
    assert progress.phase == "init done"
    assert progress.fold.phase_means() == {"init": 7.5}  # steps stay out of the phase means


def test_tail_prints_init_steps_and_a_trainers_parts() -> None:
    line = format_event(phase("critic_init", "end", "init", seconds=15.25,
                              parts={"model build": 6.9, "optimizer": 1.6}))
    assert "init  critic init end (15.25 s): model build 6.9 s, optimizer 1.6 s" in line
    assert "startup  init start" in format_event(phase("init", "start"))
