#!/usr/bin/env python3
"""The per-phase breakdown of a real PPO step, weight-sync paths (and, with --decode, the hf
decoder's variants) side by side in one run.

    python3 bench/step_bench.py                     # on the H200: qwen3-0.6b-ppo-1gpu, twice
    .venv/bin/python bench/step_bench.py --smoke    # tiny-cpu, both runs on the packed path
    (also `python3 bench/gpu_bench.py --only step`; bench/gpu_device_run.sh sync runs it)

Two `ppodeck run`s of the same preset, one with the default path choice (CUDA IPC where the
actor and the hf rollout share the GPU: engine/model/ipc_sync.py) and one with
PPODECK_WEIGHT_SYNC=packed (host bytes through Ray, today's path elsewhere). From each run's
events: the phase seconds averaged over the rollouts after the first two (rollout 0 is
critic-only, the first actor/critic phases compile), the wall time per rollout (one rollout's
first phase start to the next one's), and each weight sync's path and seconds: the actor's
export (at the end of actor_train, awake), the transfer and the rollout's load (the sync's log
event, engine/driver/ppo.py log_weight_sync). Printed as one table, runs as columns.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIP_ROLLOUTS = 2
PHASES = ("generate", "rollout_offload", "critic_train", "actor_train", "save",
          "rollout_onload", "update_weights")


def run_preset(preset: str, num_rollout: int, env_extra: dict[str, str],
               timeout_s: float) -> tuple[list[dict], float, str]:
    """(events, wall seconds, the CLI's last lines) of one `ppodeck run` in a fresh runs dir."""
    runs = Path(tempfile.mkdtemp(prefix="step-bench-"))
    env = {**os.environ, **env_extra, "PPODECK_RUNS_DIR": str(runs)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(REPO)) if p)
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "ppodeck", "run", preset, "--yes", "--set",
                               f"num-rollout={num_rollout}"], cwd=REPO, env=env, text=True,
                              capture_output=True, timeout=timeout_s, check=False)
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-6:])
    except subprocess.TimeoutExpired:
        tail = f"TIMED OUT after {timeout_s:.0f} s: the rollouts it finished are counted"
    wall = time.perf_counter() - start
    found = sorted(runs.glob("*/events.jsonl"))
    for run_dir in (f.parent for f in found):  # a timed-out driver must not hold the GPU
        subprocess.run([sys.executable, "-m", "ppodeck", "stop", run_dir.name, "--force"], cwd=REPO,
                       env=env, capture_output=True, check=False, timeout=60)
    events = ([json.loads(line) for line in found[-1].read_text().splitlines() if line.strip()]
              if found else [])
    return events, wall, tail


def phase_means(events: list[dict]) -> dict[str, float]:
    seconds: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if (e["kind"] == "phase" and e["state"] == "end" and e.get("rollout_id") is not None
                and e["rollout_id"] >= SKIP_ROLLOUTS):
            seconds[e["name"]].append(float(e["seconds"]))
    return {name: statistics.fmean(values) for name, values in seconds.items()}


def rollout_starts(events: list[dict]) -> dict[int, float]:
    """Each rollout's first phase start."""
    starts: dict[int, float] = {}
    for e in events:
        rid = e.get("rollout_id")
        if e["kind"] == "phase" and e["state"] == "start" and rid is not None:
            starts.setdefault(rid, float(e["ts"]))
    return starts


def rollout_wall(events: list[dict]) -> float | None:
    """Mean seconds from one rollout's first phase start to the next rollout's."""
    starts = rollout_starts(events)
    gaps = [starts[r + 1] - starts[r] for r in sorted(starts)
            if r >= SKIP_ROLLOUTS and r + 1 in starts]
    return statistics.fmean(gaps) if gaps else None


def trainer_moves(events: list[dict]) -> dict[str, float] | None:
    """Per rollout after the skipped ones: the trainers' move seconds (their own copy time)
    and what the driver still waited of them (waited_seconds: the moves not overlapped)."""
    starts = sorted(t for r, t in rollout_starts(events).items() if r >= SKIP_ROLLOUTS)
    if len(starts) < 2:
        return None
    moves = [e for e in events if e["kind"] == "offload" and e["model"] != "rollout"
             and starts[0] <= float(e["ts"]) < starts[-1] and not e.get("noop")]
    rollouts = len(starts) - 1
    return {"trainer moves": sum(float(e["seconds"]) for e in moves) / rollouts,
            "trainer moves waited": sum(float(e.get("waited_seconds", e["seconds"]))
                                        for e in moves) / rollouts}


def syncs(events: list[dict]) -> list[dict]:
    """The weight-sync log events (driver.log_weight_sync), initial push excluded."""
    return [e for e in events if e["kind"] == "log" and e.get("sync_path")]


def summarize(events: list[dict]) -> dict[str, float | str | None]:
    out: dict[str, float | str | None] = dict(phase_means(events))
    out["wall per rollout"] = rollout_wall(events)
    out.update(trainer_moves(events) or {})
    later = syncs(events)[SKIP_ROLLOUTS:] or syncs(events)  # one per rollout, in order
    if later:
        out["sync path"] = ",".join(sorted({e["sync_path"] for e in later}))
        for key, field in (("sync seconds", "sync_seconds"), ("sync: actor export",
                                                               "export_seconds"),
                           ("sync: transfer", "transfer_seconds"),
                           ("sync: rollout load", "load_seconds")):
            out[key] = statistics.fmean(e[field] for e in later)
    states = [e for e in events if e["kind"] == "status"]
    out["final state"] = states[-1]["state"] if states else None
    return out


def table(columns: dict[str, dict]) -> str:
    keys = [k for k in (*PHASES, "wall per rollout", "trainer moves", "trainer moves waited",
                        "sync path", "sync seconds",
                        "sync: actor export", "sync: transfer", "sync: rollout load",
                        "final state")
            if any(k in c for c in columns.values())]
    lines = [f"{'s, mean over rollouts >= ' + str(SKIP_ROLLOUTS):<30}"
             + "".join(f"{name:>16}" for name in columns)]
    for key in keys:
        cells = []
        for column in columns.values():
            value = column.get(key)
            cells.append(f"{value:>16.3f}" if isinstance(value, float) else f"{value or '-':>16}")
        lines.append(f"{key:<30}" + "".join(cells))
    return "\n".join(lines)


def step_breakdown(preset: str, num_rollout: int, timeout_s: float,
                   out_dir: Path | None = None, decoders: tuple[str, ...] = (),
                   overlap: bool = False, packed: bool = True) -> dict[str, dict]:
    """The default run, the packed-sync run (unless `packed` is False), one with the
    train-state moves each waited on where it starts (`overlap`: PPODECK_OVERLAP_MOVES=0, against
    the default's overlap as the memory plan allows, engine/driver/offload.py) and one per
    decoder variant named;
    the table printed; the events copied to out_dir when given."""
    runs = [("default path", {})]
    runs += [("packed forced", {"PPODECK_WEIGHT_SYNC": "packed"})] if packed else []
    runs += [("moves waited", {"PPODECK_OVERLAP_MOVES": "0"})] if overlap else []
    runs += [(f"decode {variant}", {"PPODECK_DECODE": variant}) for variant in decoders]
    columns = {}
    for name, env in runs:
        events, wall, tail = run_preset(preset, num_rollout, env, timeout_s)
        print(f"== {name}: {preset}, {num_rollout} rollouts, {wall:.0f} s\n{tail}", flush=True)
        for e in [e for e in events if e["kind"] == "log" and e["msg"].startswith("moves:")]:
            print(f"  {e['msg'][:200]}")
        for e in syncs(events):
            print(f"  {e['msg'][:200]}")
        if out_dir is not None:
            slug = (f"decode_{len(columns)}" if env.get("PPODECK_DECODE")
                    else name.split()[0].replace("moves", "waited"))
            (out_dir / f"step_{slug}_events.jsonl").write_text(
                "".join(json.dumps(e) + "\n" for e in events))
        columns[name] = summarize(events)
    print(table(columns), flush=True)
    return columns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny-cpu on CPU")
    parser.add_argument("--preset", default=None)
    parser.add_argument("--num-rollout", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    parser.add_argument("--out", type=Path, default=None, help="copy both runs' events here")
    parser.add_argument("--decode", action="append", default=[], metavar="VARIANT",
                        help="one more run with PPODECK_DECODE=VARIANT (the hf decoder; "
                             "repeatable), e.g. ref against the default")
    parser.add_argument("--overlap", action="store_true",
                        help="one more run with PPODECK_OVERLAP_MOVES=0: the train-state moves "
                             "each waited on where it starts, against the default's overlap "
                             "where the memory plan allows")
    parser.add_argument("--no-packed", action="store_true", help="skip the packed-sync run")
    ns = parser.parse_args(argv)
    preset = ns.preset or ("tiny-cpu" if ns.smoke else "qwen3-0.6b-ppo-1gpu")
    step_breakdown(preset, ns.num_rollout, ns.timeout, ns.out, tuple(ns.decode), ns.overlap,
                   not ns.no_packed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
