"""Wall and CPU seconds of the same tests in two checkouts, side by side (issue #42 item 5).

    .venv/bin/python bench/test_cpu.py --before DIR [--repeat N] NODE [NODE ...]

Runs `pytest -q NODE...` in DIR (the checkout before a change) and in this checkout, alternately,
`--repeat` times each. CPU is user + system time of pytest and every process it waited for (a
test's subprocesses, e.g. the Triton interpreter's), so on a shared, loaded machine it moves far
less than the wall time does; processes that outlive their parent (Ray's daemons) are not in it.
Each checkout's pytest imports its own code (PYTHONPATH is set to the checkout).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def run_once(checkout: Path, nodes: list[str]) -> tuple[float, float, int]:
    """(wall s, CPU s, exit code) of one pytest run of `nodes` in `checkout`."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *nodes],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        print(f"  {checkout}: pytest exit {done.returncode}\n{done.stdout[-1500:]}")
    return wall, cpu, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, type=Path, help="the checkout before")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("nodes", nargs="+", help="pytest node ids or files")
    args = parser.parse_args()
    runs: dict[str, list[tuple[float, float, int]]] = {"before": [], "after": []}
    for _ in range(args.repeat):
        runs["before"].append(run_once(args.before.resolve(), args.nodes))
        runs["after"].append(run_once(HERE, args.nodes))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}  nodes: {' '.join(args.nodes)}")
    print(f"{'':8} {'wall s':>8} {'CPU s':>8}  exit codes")
    for name, results in runs.items():
        wall = statistics.median(r[0] for r in results)
        cpu = statistics.median(r[1] for r in results)
        print(f"{name:8} {wall:8.1f} {cpu:8.1f}  {[r[2] for r in results]}")
    ratio = statistics.median(r[1] for r in runs["after"]) / max(
        1e-9, statistics.median(r[1] for r in runs["before"])
    )
    print(f"after / before CPU: {ratio:.2f}")


if __name__ == "__main__":
    main()
