"""Where the test suite's time goes: per-directory totals and the slowest tests, from pytest's
JUnit XML (issue #42 item 5).

    .venv/bin/python -m pytest -q --junitxml=/tmp/suite.xml
    .venv/bin/python bench/test_times.py /tmp/suite.xml [--top 25] [--compare /tmp/before.xml]

The times are each test's own (setup, call and teardown), so a module fixture's run counts
against the first test that asks for it. Note the machine's load beside the figures: on a
shared 2-core machine they move with whatever else runs.
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import defaultdict


def test_times(path: str) -> dict[str, float]:
    """{node id: seconds} for every test case in the file."""
    times: dict[str, float] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        times[f"{module}.py::{case.get('name')}"] = float(case.get("time") or 0.0)
    return times


def per_directory(times: dict[str, float]) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for node, seconds in times.items():
        parts = node.split("/")
        totals["/".join(parts[:2]) if len(parts) > 2 else parts[0]] += seconds
    return dict(totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("xml")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--compare", metavar="XML", help="an earlier run's file: before / after")
    args = parser.parse_args()
    after = test_times(args.xml)
    before = test_times(args.compare) if args.compare else {}
    dirs_after, dirs_before = per_directory(after), per_directory(before)
    print(f"{'directory':<22}{'before s' if before else '':>10}{'s':>10}{'tests':>7}")
    for name in sorted(set(dirs_after) | set(dirs_before)):
        count = sum(1 for node in after if node.startswith(name + "/"))
        was = f"{dirs_before.get(name, 0.0):10.1f}" if before else ""
        print(f"{name:<22}{was:>10}{dirs_after.get(name, 0.0):10.1f}{count:>7}")
    total_before = f"{sum(before.values()):10.1f}" if before else ""
    print(f"{'total':<22}{total_before:>10}{sum(after.values()):10.1f}{len(after):>7}")
    print(f"\nslowest {args.top}:")
    for node, seconds in sorted(after.items(), key=lambda item: -item[1])[:args.top]:
        print(f"{seconds:8.1f}  {node}")


if __name__ == "__main__":
    main()
