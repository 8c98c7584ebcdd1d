"""`ppodeck run --resume`: the saves a resume would load are checked before anything starts.

A damaged save (a file cut, truncated, changed or deleted since it was written; see
engine/run/save_manifest.py) is named, file by file, and never loaded. The newest save whose
actor and critic are both whole is offered instead; --yes takes it and says so.
"""

from __future__ import annotations

import typer

from ...engine.config import RunConfig
from ...engine.run.rundir import RunDir
from .common import EXIT_INVALID, err, fail


def settle_damaged_save(rundir: RunDir, config: RunConfig, yes: bool) -> None:
    """Return when the resume may go on (the saves are whole, or an older whole one was taken);
    exit with the damage named otherwise."""
    from ...engine.config import resolve
    from ...engine.launch.resume_check import damaged_saves, fallback, take_save
    from ...engine.run.save_manifest import iteration_of

    if not config.is_set("load"):  # as prepare_resume: the actor resumes from the run's --save
        config = config.with_values(load=config.get("save"))
    args = resolve(config.with_values(run_dir=str(rundir.path)))
    damage = damaged_saves(args)
    if not damage:
        return
    err(f"run {rundir.id}: the save it would resume from is damaged and will not be loaded:")
    for item in damage:
        err(f"  {item.text()}")
    damaged = [i for d in damage if (i := iteration_of(d.save_dir)) is not None]
    good = fallback(args, min(damaged) if damaged else None)
    if good is None:
        fail("no older save of this run is whole, so it cannot resume. Fix: start a new run",
             EXIT_INVALID)
    offer = (f"the newest whole save is iteration {good.iteration} (actor and critic checked: "
             f"sizes and checksums); resuming there repeats the rollouts after it")
    if yes:
        err(f"--yes: {offer}. Taking it; the damaged save stays on disk, unused")
    elif not typer.confirm(f"{offer}. Resume from it?", default=False, err=True):
        fail(f"nothing was resumed. Fix: `ppodeck run --resume {rundir.id} --yes` takes "
             f"iteration {good.iteration}", EXIT_INVALID)
    for tracker in take_save(args, good.iteration):
        err(f"  {tracker} now names iteration {good.iteration}")
