"""Figures for the reliability note (issue #8): run tests/reliability and print what passed.

    .venv/bin/python bench/reliability_figures.py           # default suite (~4 min on 2 cores)
    .venv/bin/python bench/reliability_figures.py --slow    # + 10,000 fuzzed inputs per property

Prints: fault/safety scenarios passed (one line per test), fuzzed inputs tried and how many
crashed, the rollouts/optimizer steps lost on resume against the save interval, and how fast
a dead worker or a killed driver is noticed. The numbers come from the tests themselves (they
write them to a JSON file given by $PPODECK_RELIABILITY_FIGURES) and from pytest's JUnit XML.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_suite(slow: bool, out: Path) -> tuple[int, Path, Path]:
    figures, junit = out / "figures.json", out / "junit.xml"
    marker = "not gpu" if slow else "not gpu and not slow"
    argv = [sys.executable, "-m", "pytest", "tests/reliability", "-q", "-m", marker,
            f"--junitxml={junit}", "-p", "no:cacheprovider"]
    env = {**os.environ, "PPODECK_RELIABILITY_FIGURES": str(figures)}
    code = subprocess.call(argv, cwd=REPO, env=env)
    return code, figures, junit


def scenario_results(junit: Path) -> list[tuple[str, str, float]]:
    rows = []
    for case in ET.parse(junit).iter("testcase"):
        if case.find("skipped") is not None:
            outcome = "xfail" if "xfail" in (case.find("skipped").get("type") or "") else "skip"
        elif case.find("failure") is not None or case.find("error") is not None:
            outcome = "FAIL"
        else:
            outcome = "pass"
        module = case.get("classname", "").rsplit(".", 1)[-1]
        rows.append((f"{module}::{case.get('name')}", outcome, float(case.get("time", 0))))
    return rows


def report(rows: list[tuple[str, str, float]], figures: dict) -> str:
    lines = ["Scenarios (tests/reliability):"]
    lines += [f"  {outcome:<5} {seconds:6.1f} s  {name}" for name, outcome, seconds in rows]
    passed = sum(outcome == "pass" for _, outcome, _ in rows)
    failed = sum(outcome == "FAIL" for _, outcome, _ in rows)
    lines.append(f"  => {passed} passed, {failed} failed, {len(rows) - passed - failed} "
                 f"skipped/xfail, {sum(s for *_, s in rows):.0f} s in all")
    fuzz = figures.get("fuzz_examples", {})
    fuzz_failed = [name for name, outcome, _ in rows if "fuzz" in name and outcome == "FAIL"]
    lines.append(f"Fuzzed inputs tried (crashes: {len(fuzz_failed)}):")
    lines += [f"  {count:>7,}  {kind}" for kind, count in sorted(fuzz.items())]
    lines.append(f"  {sum(fuzz.values()):>7,}  in all (tests/config/test_properties.py adds "
                 "its in-process ones)")
    resume = figures.get("resume")
    if resume:
        lines.append(
            f"Resume after SIGKILL: save every {resume['save_interval_rollouts']} rollouts; "
            f"{resume['rollouts_done_before_kill']} rollouts done when SIGKILLed; resumed at "
            f"rollout {resume['resumed_at_rollout']}: lost {resume['rollouts_lost']} finished "
            f"rollout(s) = {resume['optimizer_steps_lost']} optimizer steps (bound: fewer "
            f"than {resume['save_interval_rollouts']} rollouts); status recorded "
            f"{resume['kill_to_status_recorded_s']} s after the kill")
    if "worker_death_to_failed_status_s" in figures:
        lines.append(f"Dead critic rank (SIGKILL) -> failed status naming it: "
                     f"{figures['worker_death_to_failed_status_s']} s")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", action="store_true", help="include the 10,000-example runs")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        code, figures_path, junit = run_suite(ns.slow, Path(tmp))
        figures = json.loads(figures_path.read_text()) if figures_path.exists() else {}
        rows = scenario_results(junit) if junit.exists() else []
    print()
    print(report(rows, figures))
    return code


if __name__ == "__main__":
    sys.exit(main())
