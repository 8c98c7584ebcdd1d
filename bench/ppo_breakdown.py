#!/usr/bin/env python3
"""PPO step breakdown of runs side by side, from their events.jsonl (one column per run).

    python3 bench/ppo_breakdown.py hf_events.jsonl sglang_events.jsonl

Per run: the phase seconds averaged over the rollouts after the first two (rollout 0 is
critic-only and the first actor/critic phases compile), the mean time per rollout, the rollout
tok/s the rollout manager measured, the weight-sync log lines, what each rollout offload and
onload freed or took back (NVML where the backend measured it), the engine start notes, and
the final state. Where a run did not get past a phase, its column says "-".
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

SKIP_ROLLOUTS = 2


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def phase_means(events: list[dict]) -> dict[str, float]:
    seconds: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e["kind"] == "phase" and e["state"] == "end" and e.get("rollout_id") is not None \
                and e["rollout_id"] >= SKIP_ROLLOUTS:
            seconds[e["name"]].append(float(e["seconds"]))
    return {name: statistics.fmean(values) for name, values in seconds.items()}


def rollout_metric(events: list[dict], key: str) -> float | None:
    values = [e["metrics"][key] for e in events if e["kind"] == "metrics"
              and key in (e.get("metrics") or {}) and e.get("rollout_id", 0) >= SKIP_ROLLOUTS
              and e["metrics"][key] is not None]
    return statistics.fmean(values) if values else None


def describe(name: str, events: list[dict]) -> None:
    print(f"== {name}")
    for e in events:
        if e["kind"] == "log" and (e["level"] != "info" or any(
                word in e["msg"] for word in ("weight sync", "sglang", "backend", "CUDA IPC"))):
            print(f"  log {e['level']}: {e['msg'][:240]}")
        elif e["kind"] == "offload" and e["model"] == "rollout" and not e["noop"]:
            print(f"  rollout {e['direction']:<7} -> {e['where']:<8} "
                  f"{e['bytes'] / 2**30:6.2f} GiB in {e['seconds']:.3f} s "
                  f"(gbps {e['gbps']}, NVML used after "
                  f"{e.get('nvml_after_bytes', 0) / 2**30:.1f} GiB)")
    statuses = [e for e in events if e["kind"] == "status"]
    if statuses:
        last = statuses[-1]
        print(f"  final status: {last['state']} {last.get('detail', '')[:200]}")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    runs = {}
    for arg in argv:
        path = Path(arg)
        if not path.is_file():
            print(f"{path}: missing (that run did not produce events)")
            continue
        runs[path.stem.removesuffix("_events").removesuffix("events") or path.stem] = load(path)
    for name, events in runs.items():
        describe(name, events)
    means = {name: phase_means(events) for name, events in runs.items()}
    phases = sorted({p for m in means.values() for p in m})
    names = list(runs)
    print(f"\nphase seconds, mean over rollouts >= {SKIP_ROLLOUTS}")
    print(f"{'phase':<22}" + "".join(f"{n:>14}" for n in names))
    for phase in phases:
        print(f"{phase:<22}" + "".join(
            f"{means[n][phase]:>14.3f}" if phase in means[n] else f"{'-':>14}" for n in names))
    for key in ("perf/rollout_time", "perf/tokens_per_sec", "rollout/raw_reward",
                "rollout/response_len/mean", "train/train_rollout_logprob_abs_diff",
                "train/train_rollout_kl"):
        values = [rollout_metric(runs[n], key) for n in names]
        print(f"{key[-22:]:<22}" + "".join(f"{v:>14.4f}" if v is not None else f"{'-':>14}"
                                           for v in values))
    names_seen = {n: event_names(runs[n]) for n in names}
    for n in names[1:]:
        only_first, only_this = names_seen[names[0]] - names_seen[n], names_seen[n] - names_seen[
            names[0]]
        print(f"\nevent names only in {names[0]}: {sorted(only_first) or 'none'}; only in {n}: "
              f"{sorted(only_this) or 'none'}")
    return 0


def event_names(events: list[dict]) -> set[str]:
    """kind, plus the phase name / metric step key / offload model: what the front ends key on."""
    return {e["kind"] + ":" + str(e.get("name") or e.get("step_key") or e.get("model") or "")
            for e in events if e["kind"] != "log"}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
