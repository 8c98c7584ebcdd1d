"""Verified saves in the CLI: `ppodeck run --resume` checks the saves it would load before
anything starts, and `ppodeck runs saves` checks every save of a run or a save directory.

A damaged save (a file cut, truncated, changed or deleted since it was written; see
engine/run/save_manifest.py) is named, file by file, and never loaded. The newest save whose
actor and critic are both whole is offered instead; --yes takes it and says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ...engine.config import RunConfig
from ...engine.run.rundir import RunDir
from .common import EXIT_INVALID, err, fail, find_run_or_fail


def settle_damaged_save(rundir: RunDir, config: RunConfig, yes: bool) -> None:
    """Return when the resume may go on (the saves are whole, or an older whole one was taken);
    exit with the damage named otherwise."""
    from ...engine.config import resolve
    from ...engine.host.machine import environment
    from ...engine.launch.resume_check import damaged_saves, fallback, take_save
    from ...engine.run.save_manifest import iteration_of

    if not config.is_set("load"):  # as prepare_resume: the actor resumes from the run's --save
        config = config.with_values(load=config.get("save"))
    args = resolve(config.with_values(run_dir=str(rundir.path)), environment())
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


def runs_saves(
    target: Annotated[str, typer.Argument(
        metavar="RUN|DIR", help="A run (id, prefix or path), or a save directory holding "
                                "iter_* directories (a miles run's --save).")],
    quick: Annotated[bool, typer.Option(
        "--quick", help="Sizes only, no checksums (a manifest's sha256 reads every byte).")
    ] = False,
) -> None:
    """Check every save of a run, or of a save directory, file by file: against the manifest
    written with it, else (a miles run's torch_dist saves) against its shard index. The critic
    sibling (DIR_critic) is checked with each iteration. Exit 1 when the newest is damaged.

    Example:

    \b
        ppodeck runs saves 250101-120000-tiny-cpu-1a2b
        ppodeck runs saves /data/miles/qwen3-4b-ppo/ckpt --quick
    """
    from ...engine.run.save_manifest import check_iteration, iterations, save_path

    roots = _save_roots(target)
    found = sorted({i for root in roots for i in iterations(root)}, reverse=True)
    if not found:
        fail(f"no saves (iter_* directories) under {', '.join(map(str, roots))}", EXIT_INVALID)
    newest_bad = False
    for index, iteration in enumerate(found):
        present = [(root, save_path(root, iteration).exists()) for root in roots]
        check = check_iteration(iteration, [(root, True) for root, there in present if there],
                                checksums=not quick)
        missing = [root.name for root, there in present if not there]
        verdict = "whole" if check.good else "DAMAGED"
        note = f" (no save in {', '.join(missing)})" if missing else ""
        typer.echo(f"iteration {iteration}: {verdict}{note}")
        for item in check.damage:
            typer.echo(f"  {item.text()}")
        newest_bad = newest_bad or (index == 0 and not check.good)
    raise typer.Exit(EXIT_INVALID if newest_bad else 0)


def _save_roots(target: str) -> list[Path]:
    """A save directory (and its _critic sibling), or a run's --save and --critic-save."""
    path = Path(target).expanduser()
    if path.is_dir() and any(path.glob("iter_*")):
        sibling = path.with_name(f"{path.name}_critic")
        return [path, *([sibling] if sibling.is_dir() else [])]
    from ...engine.config import resolve
    from ...engine.host.machine import environment
    from ...engine.presets import PresetError, config_from_toml

    rundir = find_run_or_fail(target)
    try:
        config = config_from_toml(rundir.config_toml.read_text(), rundir.config_toml)
    except (OSError, PresetError) as exc:
        fail(f"run {rundir.id}: its config is unreadable: {exc}", EXIT_INVALID)
    args = resolve(config.with_values(run_dir=str(rundir.path)), environment())
    if not args["save"]:
        fail(f"run {rundir.id} was started without --save: it has no saves", EXIT_INVALID)
    critic = args["critic_save"] if args["use_critic"] else None
    return [Path(args["save"]), *([Path(critic)] if critic else [])]
