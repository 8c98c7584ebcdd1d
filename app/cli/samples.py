"""`ppodeck samples RUN`: a rollout's responses with their rewards and per-token numbers.

Reads `<run>/samples/rollout_<id>.jsonl` (engine/run/samples.py). Data goes to stdout (a table, or
JSON with every field), diagnostics to stderr. Exit codes: app/cli/common.py (2: no such run,
no samples, no such rollout).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from ...engine.run.samples import (
    FINDING_VIEWS,
    SORTS,
    SampleRow,
    SamplesNotFound,
    describe_ids,
    disk_bytes,
    format_bytes,
    list_rollouts,
    one_line,
    read_rows,
    read_samples,
    sort_samples,
)
from .common import EXIT_USAGE, JsonOption, RunArg, err, fail, find_run_or_fail

RESPONSE_WIDTH = 60


def register(app: typer.Typer) -> None:
    app.command("samples")(samples)


def samples(
    run: RunArg,
    rollout: Annotated[int | None, typer.Option(
        "--rollout", "-r", metavar="N", help="Rollout id (default: the latest with samples).")
    ] = None,
    sort: Annotated[str, typer.Option(
        "--sort", metavar="KEY",
        help="Order: index, reward, advantage (the mean raw advantage over trained tokens), "
             "length, gap (the largest trainer/rollout log-prob gap); all but index from the "
             "largest.")] = "index",
    json_out: JsonOption = False,
) -> None:
    """A rollout's samples: reward, length, status and the start of each response.

    --json prints every field of each sample, with the per-token lists (tokens, log_probs,
    rollout_log_probs, values, returns, advantages, entropy, loss_mask). The run keeps them
    under samples/ (--samples-per-rollout caps how many per rollout).

    RUN is a run id from `ppodeck runs ls` (or the path of a run directory).

    Example:

    \b
        ppodeck samples 260101-000000-tiny-cpu-abcd
        ppodeck samples 260101-000000-tiny-cpu-abcd --rollout 3 --sort advantage
        ppodeck samples 260101-000000-tiny-cpu-abcd -r 3 --json | jq '.[0].advantages'
    """
    if sort not in SORTS:
        fail(f"--sort {sort}: expected one of {', '.join(SORTS)}", EXIT_USAGE)
    rundir = find_run_or_fail(run)
    have = list_rollouts(rundir.path)
    if not have:
        fail(f"run {rundir.id} has no samples ({rundir.path / 'samples'} is missing or "
             "empty). Runs keep them from the first rollout on unless --samples-per-rollout "
             "0; runs from before PPO Deck kept samples have none.", EXIT_USAGE)
    chosen = have[-1] if rollout is None else rollout
    warnings: list[str] = []
    read = read_samples if json_out else read_rows  # the table needs no per-token lists
    try:
        records = sort_samples(read(rundir.path, chosen, warnings), sort)
    except SamplesNotFound as exc:
        fail(str(exc), EXIT_USAGE)
    for warning in warnings:
        err(f"ppodeck: warning: {warning}")
    if json_out:
        typer.echo(json.dumps([asdict(r) for r in records], ensure_ascii=False, default=str))
        return
    err(f"run {rundir.id}: rollout {chosen}, {len(records)} samples (rollouts with samples: "
        f"{describe_ids(have)}; samples/ holds {format_bytes(disk_bytes(rundir.path))})")
    typer.echo(table(records))


def table(records: list[SampleRow]) -> str:
    """`raw`: the reward function's score (miles' raw_reward); `reward`: as trained (GRPO
    normalizes it per group; a miles dump's is its training data's)."""
    header = f"{'rollout':>7} {'index':>5} {'raw':>8} {'reward':>8} {'adv':>8} {'length':>6} " \
             f"{'status':<9} response"
    lines = [header]
    for r in records:
        lines.append(f"{r.rollout_id:>7} {r.index:>5} {_num(r.raw_reward):>8} {_num(r.reward):>8} "
                     f"{_num(r.mean_advantage):>8} {r.response_length:>6} {r.status:<9} "
                     f"{one_line(r.response, RESPONSE_WIDTH)}")
    return "\n".join(lines)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def finding_hint(run_dir: Path, run_id: str, code: str, rollout_id: int | None) -> str | None:
    """The command that lists the samples behind a health finding, where the run kept them."""
    if code not in FINDING_VIEWS or rollout_id is None:
        return None
    if rollout_id not in list_rollouts(run_dir):
        return None
    from ...engine.run.rundir import RunNotFound, find_run

    try:  # the id where it finds this run, else the path
        name = run_id if find_run(run_id).path.resolve() == Path(run_dir).resolve() else None
    except (RunNotFound, OSError):
        name = None
    sort, _strip, why = FINDING_VIEWS[code]
    return (f"samples: ppodeck samples {name or run_dir} --rollout {rollout_id} --sort {sort} "
            f"({why})")
