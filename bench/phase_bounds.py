#!/usr/bin/env python3
"""Each phase of a run's steady rollouts against what its machine can do (engine/run/bounds.py),
and the speed verdict: the phase that loses the most seconds against its bound.

    python bench/phase_bounds.py RUN [--json]     # a run id, prefix, path, or a miles dump

The bounds are the machine facts cached for the run's machine kind in
$PPODECK_HOME/machine-facts.json (`python -m ppodeck.engine.host.probe` on that machine writes
them; a run's driver does on its first launch there).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ppodeck.engine.run.bounds import run_speed  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run id, prefix or path, or a miles --dump-details dir")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ns = parser.parse_args(argv)
    from ppodeck.engine.miles.watch import MilesDumpError, find_or_open
    from ppodeck.engine.run.rundir import RunNotFound

    try:
        rundir = find_or_open(ns.run)
    except (RunNotFound, MilesDumpError) as exc:
        print(f"phase_bounds: {exc}", file=sys.stderr)
        return 2
    speed = run_speed(rundir.path)
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
