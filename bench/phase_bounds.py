#!/usr/bin/env python3
"""Each phase of a run's steady rollouts against what its machine can do (engine/run/bounds.py),
and the speed verdict: the phase that loses the most seconds against its bound.

    python bench/phase_bounds.py RUN [--json]     # a run id, prefix, path, or a miles dump
    python bench/phase_bounds.py DUMP --facts bench/results/gpu-bounds-h100/probe.json \
        --samples 64 --params 596049920          # a watched dump against kept bounds

The bounds are the machine facts cached for the run's machine kind in
$PPODECK_HOME/machine-facts.json (`python -m ppodeck.engine.host.probe` on that machine writes
them; a run's driver does on its first launch there). A watched miles dump records neither its
machine kind nor its shape: --facts (a probe's JSON, bench/gpu_bounds_probe.py --json),
--samples and --params give them.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ppodeck.engine.host.probe import MachineFacts  # noqa: E402
from ppodeck.engine.run.bounds import SpeedContext, run_speed, speed_context  # noqa: E402


def _context(path: Path, ns: argparse.Namespace) -> SpeedContext:
    """The run's own context, with what the command line gives in place of what it lacks."""
    ctx = speed_context(path)
    if ns.facts is not None:
        figures = json.loads(ns.facts.read_text())
        kind = f"gpu: {figures.get('device', 'GPU')} x1 (from {ns.facts})"
        facts = MachineFacts.from_dict({"measured_at": 0.0, **figures, "kind": kind})
        ctx = replace(ctx, kind=kind, facts=facts, bytes_per_param=2)
    if ns.samples:
        ctx = replace(ctx, samples=ns.samples)
    if ns.params:
        ctx = replace(ctx, params=ns.params)
    return ctx


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run id, prefix or path, or a miles --dump-details dir")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--facts", type=Path, help="a probe's JSON to hold the run against")
    parser.add_argument("--samples", type=int, help="samples per rollout (the decode batch)")
    parser.add_argument("--params", type=int, help="the model's parameters")
    ns = parser.parse_args(argv)
    from ppodeck.engine.miles.watch import MilesDumpError, find_or_open
    from ppodeck.engine.run.rundir import RunNotFound

    try:
        rundir = find_or_open(ns.run)
    except (RunNotFound, MilesDumpError) as exc:
        print(f"phase_bounds: {exc}", file=sys.stderr)
        return 2
    speed = run_speed(rundir.path, _context(rundir.path, ns))
    if ns.json:
        print(json.dumps({"run": rundir.id, **speed.as_dict()}, indent=1))
        return 0
    print(f"run {rundir.id}: {speed.rollouts} steady rollouts, "
          f"{speed.step_s or 0.0:.3f} s a step")
    print(speed.basis or "no machine facts")
    for phase in speed.phases:
        print(f"  {phase.text()}")
    print(f"speed: {speed.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
