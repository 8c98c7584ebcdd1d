"""Write engine/config/data/forecast_kept.json: the forecast's calibrations from kept evidence.

Each entry names a bench/results/<name>/events.jsonl.gz, the preset and overrides that run
used, and the machine kind it ran on (as engine/host/kind.py names it there). The evidence
files hold the driver's events only (no status.json), so the launch overhead counted is the
driver's own (first event to init, last phase to the final status), not the CLI's start.

    python bench/forecast_kept.py            # rewrite the file
    python bench/forecast_kept.py --check    # exit 1 when the file differs from the evidence
    python bench/forecast_kept.py --against  # the kept forecast vs the other kept GPU run
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ppodeck.engine.config import resolve  # noqa: E402
from ppodeck.engine.config.derived import derive_resolved  # noqa: E402
from ppodeck.engine.config.forecast import KEPT_FILE, Calibration, work_of  # noqa: E402
from ppodeck.engine.presets import load_preset, resolve_preset  # noqa: E402
from ppodeck.engine.run.pace import phase_times  # noqa: E402

EVIDENCE = (
    # (results dir, preset, overrides, machine kind)
    ("e2e-and-gpu-tests-dddab8d", "qwen3-0.6b-ppo-1gpu",
     {"rollout_backend": "hf", "num_rollout": 6}, "gpu: NVIDIA H200 x1"),
    ("forecast-qwen3-0.6b-h100", "qwen3-0.6b-ppo-1gpu",
     {"rollout_backend": "hf", "num_rollout": 3}, "gpu: NVIDIA H100 80GB HBM3 x1"),
)


def calibration(name: str, preset: str, overrides: dict, machine: str) -> Calibration:
    path = ROOT / "bench" / "results" / name / "events.jsonl.gz"
    events = [json.loads(line) for line in gzip.open(path, "rt") if line.strip()]
    times = phase_times(events)
    r = resolve(resolve_preset(load_preset(preset)).with_values(**overrides), os.environ)
    derived = derive_resolved(r, os.environ)
    work = work_of(r, derived.params, derived.samples_per_rollout)
    assert work is not None and times.init_s is not None and times.first_ts is not None
    first_event, last_event = events[0]["ts"], events[-1]["ts"]
    saves = [p["save"] for p in times.by_rollout.values() if "save" in p]
    return Calibration(
        machine=machine, source=f"kept evidence bench/results/{name} ({preset})", work=work,
        launch_s=round(times.first_ts - first_event + last_event - (times.last_end_ts or 0), 3),
        init_s=round(times.init_s, 3), first_extra_s=round(times.first_extra(), 3),
        phase_s={k: round(v, 4) for k, v in times.median_per_phase().items()},
        save_s=round(sorted(saves)[len(saves) // 2], 3) if saves else None,
        wall_s=round(last_event - first_event, 3))


# a kept run the calibration was not made from: (results dir, preset, overrides, machine kind)
HELD_OUT = ("e2e-qwen3-0.6b-369204e", "qwen3-0.6b-ppo-1gpu",
            {"rollout_backend": "hf", "num_rollout": 3}, "gpu: NVIDIA H200 x1")


def against() -> None:
    """The forecast from the kept calibrations for HELD_OUT's config, against its wall time
    (its first event to its last: the driver's, as the calibration counts it)."""
    from dataclasses import replace

    from ppodeck.engine.config import check
    from ppodeck.engine.config.forecast import kept_calibrations
    from ppodeck.engine.config.rules_engine import Machine

    name, preset, overrides, kind = HELD_OUT
    events = [json.loads(line) for line in
              gzip.open(ROOT / "bench" / "results" / name / "events.jsonl.gz", "rt")]
    measured = events[-1]["ts"] - events[0]["ts"]
    machine = replace(Machine(gpus=1, transformer_engine=False, sglang=False, env=os.environ),
                      kind=kind, calibrations=kept_calibrations())
    out = check(resolve_preset(load_preset(preset)).with_values(**overrides), machine).forecast
    assert out is not None and out.seconds is not None
    print(f"{name}: forecast {out.seconds:.1f} s, measured {measured:.1f} s, error "
          f"{(out.seconds / measured - 1) * 100:+.1f}% ({out.basis})")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--against", action="store_true")
    ns = parser.parse_args()
    if ns.against:
        against()
        return 0
    data = {"calibrations": [calibration(*entry).as_dict() for entry in EVIDENCE]}
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if ns.check:
        same = KEPT_FILE.read_text() == text
        print("ok" if same else f"MISMATCH: rerun python bench/forecast_kept.py ({KEPT_FILE})")
        return 0 if same else 1
    KEPT_FILE.write_text(text)
    print(f"wrote {KEPT_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
