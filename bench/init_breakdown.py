#!/usr/bin/env python3
"""Where a run's start goes, side by side: launch -> first rollout metrics, split into init's
steps (phase events with parent "init"), each trainer's init parts, and the first critic and
actor phases (layer compilation). One column per run: e.g. a preset's first launch on a machine
and its second (compile caches warm under PPODECK_HOME).

    python3 bench/init_breakdown.py RUN_DIR_OR_EVENTS [RUN_DIR_OR_EVENTS ...]

"launch" is status.json's `created` (the launcher wrote the run directory) where the run
directory is there, else the first event.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def load(arg: str) -> tuple[list[dict], float | None]:
    path = Path(arg)
    events_path = path / "events.jsonl" if path.is_dir() else path
    events = [json.loads(line) for line in events_path.read_text().splitlines() if line.strip()]
    status = events_path.with_name("status.json")
    created = json.loads(status.read_text()).get("created") if status.is_file() else None
    return events, created


def column(events: list[dict], created: float | None) -> dict[str, str]:
    launch = created if isinstance(created, (int, float)) else events[0]["ts"]
    rows: dict[str, str] = {}
    init = next((e for e in events if e["kind"] == "phase" and e["name"] == "init"), None)
    if init is not None:
        rows["launch -> init start"] = f"{init['ts'] - launch:.1f}"
    for e in events:
        if e["kind"] != "phase" or e["state"] != "end":
            continue
        if e.get("parent") == "init":
            rows[f"  {e['name']}"] = f"{e['seconds']:.1f}"
            for part, seconds in (e.get("parts") or {}).items():
                rows[f"    {e['name']}: {part}"] = f"{seconds:.2f}"
            if "warm_imports_seconds" in e:
                rows[f"    {e['name']}: imports (overlapped)"] = f"{e['warm_imports_seconds']:.2f}"
        elif e["name"] == "init":
            rows["init"] = f"{e['seconds']:.1f}"
    plan = next((e["msg"] for e in events if e["kind"] == "log"
                 and e["msg"].startswith("init: ")), None)
    if plan is not None:  # the roles one after another or at once (engine/driver/roles.py)
        rows["init plan"] = plan[len("init: "):][:24]
    for name in ("generate", "critic_train", "actor_train"):
        first = next((e for e in events if e["kind"] == "phase" and e["state"] == "end"
                      and e["name"] == name), None)
        if first is not None:
            rows[f"first {name} (rollout {first['rollout_id']})"] = f"{first['seconds']:.1f}"
            rows.update(pinning(events, first))
    metrics = next((e for e in events if e["kind"] == "metrics"
                    and e.get("step_key") == "rollout/step"), None)
    rows["launch -> first rollout metrics"] = "-" if metrics is None else \
        f"{metrics['ts'] - launch:.1f}"
    caches = next((e["msg"] for e in events if e["kind"] == "log"
                   and e["msg"].startswith("compile caches")), None)
    rows["compile caches"] = "-" if caches is None else caches.split(": ", 1)[1][:60]
    return rows


def pinning(events: list[dict], end: dict) -> dict[str, str]:
    """Host memory pinned inside a first train phase (the Adam moments' buffers), and what
    had been pinned ahead of it after init (prepinned_bytes)."""
    start = next(e["ts"] for e in events if e["kind"] == "phase" and e["state"] == "start"
                 and e["name"] == end["name"] and e["rollout_id"] == end["rollout_id"])
    moves = [e for e in events if e["kind"] == "offload" and start <= e["ts"] <= end["ts"]
             and e["direction"] == "offload"]
    if not moves:
        return {}
    pinned = sum(float(e.get("pin_seconds") or 0.0) for e in moves)
    ahead = sum(float(e.get("prepinned_bytes") or 0.0) for e in moves) / 1e9
    return {f"    {end['name']}: pin seconds": f"{pinned:.2f}",
            f"    {end['name']}: pinned ahead GB": f"{ahead:.2f}"}


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    columns = [column(*load(arg)) for arg in argv]
    names = list(dict.fromkeys(name for col in columns for name in col))
    width = max(len(n) for n in names) + 2
    print("seconds".ljust(width) + "".join(Path(a).name[-24:].rjust(26) for a in argv))
    for name in names:
        print(name.ljust(width) + "".join(col.get(name, "-").rjust(26) for col in columns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
