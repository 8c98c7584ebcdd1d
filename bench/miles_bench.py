"""Figures for watching and driving miles (engine/miles/watch.py, engine/miles/drive.py).

1. Watch: seconds to open tests/data/miles_dump (written by miles' own code) as a run, cold
   (`runs add`: translation plus samples, which loads torch) and warm (a second `tail`, nothing
   new), and the events and samples it yields; the dump's files are hashed before and after
   (must be unchanged).
2. Follow: a copy of the dump whose metrics.jsonl grows one record at a time while
   `tail --follow` runs: the lag from each append to its line on tail's stdout (median, max).
3. Drive: `ppodeck run tiny-cpu --engine miles` with the stand-in for miles' train.py
   (tests/miles_standin) through a private Ray head: seconds to the head's Jobs API, to the
   first metric and in all; with --tests the slow tests/cluster/test_miles_drive.py too.

    .venv/bin/python bench/miles_bench.py [--tests]

Everything runs in a temporary directory; the Ray head is the run's own and stops with it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DUMP = REPO / "tests" / "data" / "miles_dump"
PPODECK = [sys.executable, "-m", "ppodeck"]


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + path.read_bytes())
    return h.hexdigest()


def aged_copy(dest: Path) -> Path:
    shutil.copytree(DUMP, dest)
    stamp = time.time() - 3600
    for path in dest.rglob("*"):
        os.utime(path, (stamp, stamp))
    return dest


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=True)
    return time.monotonic() - start, done


def watch(tmp: Path, env: dict[str, str]) -> None:
    dump = aged_copy(tmp / "dump")
    before = digest(dump)
    cold, added = timed([*PPODECK, "runs", "add", str(dump)], env)
    warm, tailed = timed([*PPODECK, "tail", str(dump), "--json"], env)
    run = Path(env["PPODECK_RUNS_DIR"]) / added.stdout.strip()
    samples = sum(len(p.read_text().splitlines()) for p in (run / "samples").glob("*.jsonl"))
    print(f"watch: runs add (cold, with samples) {cold:.2f} s; tail --json (warm) {warm:.2f} s; "
          f"{len(tailed.stdout.splitlines())} events, {samples} samples; dump unchanged: "
          f"{digest(dump) == before}")


def follow(tmp: Path, env: dict[str, str]) -> None:
    dump = aged_copy(tmp / "live")
    shutil.rmtree(dump / "rollout_data")
    metrics = dump / "dashboard" / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text(lines[0])
    tail = subprocess.Popen([*PPODECK, "tail", str(dump), "--follow", "--json", "--kind",
                             "metrics"], cwd=REPO, env={**env, "PPODECK_MILES_IDLE_S": "3"},
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert tail.stdout is not None
    tail.stdout.readline()  # the first record: the follower is up
    lags = []
    for line in lines[1:]:
        with open(metrics, "a") as out:
            out.write(line)
        written = time.monotonic()
        tail.stdout.readline()
        lags.append(time.monotonic() - written)
    tail.wait(timeout=60)
    print(f"follow: append -> tail --follow line, {len(lags)} records: median "
          f"{statistics.median(lags):.2f} s, max {max(lags):.2f} s (follower polls every 1 s)")


def drive(tmp: Path, env: dict[str, str]) -> None:
    env = {**env, "PPODECK_MILES_PYTHON": sys.executable, "PPODECK_TEST_RAY_GPUS": "1",
           "RAY_AUTH_MODE": "disabled", "STANDIN_ROLLOUT_S": "0.2"}
    run = Path(env["PPODECK_RUNS_DIR"]) / "drive"
    start = time.monotonic()
    proc = subprocess.Popen([*PPODECK, "run", "tiny-cpu", "--set", "num-rollout=5", "--engine",
                             "miles", "--miles-root", str(REPO / "tests" / "miles_standin"),
                             "--run-dir", str(run)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    head = first = None
    while proc.poll() is None:
        log = (run / "driver.log").read_text() if (run / "driver.log").exists() else ""
        if head is None and "Running entrypoint for job" in log:
            head = time.monotonic() - start
        events = (run / "events.jsonl").read_text() if (run / "events.jsonl").exists() else ""
        if first is None and '"kind":"metrics"' in events:
            first = time.monotonic() - start
        time.sleep(0.1)
    total = time.monotonic() - start
    status = json.loads((run / "status.json").read_text())
    print(f"drive: exit {proc.returncode} ({status['state']}); job running after "
          f"{head or float('nan'):.1f} s, first metric {first or float('nan'):.1f} s, "
          f"5 rollouts done {total:.1f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", action="store_true", help="also the slow drive tests")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="miles-bench-") as tmp_name:
        tmp = Path(tmp_name)
        env = {**os.environ, "PPODECK_RUNS_DIR": str(tmp / "runs")}
        env.pop("RAY_ADDRESS", None)
        watch(tmp, env)
        follow(tmp, env)
        drive(tmp, env)
    if ns.tests:
        start = time.monotonic()
        code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-m", "slow",
                                "tests/cluster/test_miles_drive.py"], cwd=REPO)
        print(f"tests/cluster/test_miles_drive.py: exit {code} in "
              f"{time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
