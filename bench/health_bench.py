"""How fast a reader judges PPO health: events per second through HealthJudge, and a whole
`judge_run` (read + parse + judge) on a synthetic 2000-rollout run (about 20k events).

    .venv/bin/python bench/health_bench.py

Prints the figures measured in this run; the health rules never run in the driver, so this
is the cost a reader (`ppodeck health`, `tail`, `runs ls`, the monitor) pays.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ppodeck.engine.launch.local import prepare_run  # noqa: E402
from ppodeck.engine.presets import load_preset, resolve_preset  # noqa: E402
from ppodeck.engine.run.events import encode_event  # noqa: E402
from ppodeck.engine.run.health import HealthJudge, judge_run  # noqa: E402
from ppodeck.engine.run.rundir import write_status  # noqa: E402
from tests.health.streams import stream  # noqa: E402

ROLLOUTS = 2000


def main() -> None:
    events = stream(ROLLOUTS)
    start = time.perf_counter()
    judge = HealthJudge()
    judge.feed(events)
    judge.finish()
    feed_s = time.perf_counter() - start
    print(f"HealthJudge.feed: {len(events)} events ({ROLLOUTS} rollouts) in {feed_s:.3f} s = "
          f"{len(events) / feed_s:,.0f} events/s, {feed_s / ROLLOUTS * 1e6:.0f} us per rollout")
    with tempfile.TemporaryDirectory() as tmp:
        rundir = prepare_run(resolve_preset(load_preset("tiny-cpu")), "tiny-cpu",
                             run_dir=Path(tmp) / "run")
        write_status(rundir, state="succeeded")
        rundir.events_jsonl.write_bytes(b"".join(encode_event(e) for e in events))
        size_mb = rundir.events_jsonl.stat().st_size / 1e6
        start = time.perf_counter()
        report = judge_run(rundir.path)
        whole_s = time.perf_counter() - start
    print(f"judge_run: {size_mb:.1f} MB events.jsonl read, parsed and judged in {whole_s:.3f} s "
          f"({report.rollouts_judged} rollouts, level {report.level})")


if __name__ == "__main__":
    main()
