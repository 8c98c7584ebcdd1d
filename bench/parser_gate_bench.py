"""What the user's-own-miles gate adds to a launch (issue #46), on the real pinned miles.

    python -m bench.parser_gate_bench --rounds 3

The oracle's cached environment (bench/miles_oracle.py builds it) is the miles checkout: miles
and Megatron at the pinned commits, a Python with miles' parse-time dependencies. The config is
the oracle's qwen3-4b-ppo case that miles accepts (its fixtures: a config.json matching the
flags, a reference directory, a prompt file). Per round, in a fresh $PPODECK_HOME:

- gate cold: engine/miles/parser_gate.judge() with no kept verdict (miles' import + parse_args)
- gate cached: the same call again (the kept verdict)
- validate end to end (`python -m ppodeck validate ... --engine miles`, a new process): without
  --miles-root (no gate), with it cold, with it cached.

Medians are printed side by side, with the load average (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.miles_oracle import CACHE, MEGATRON_COMMIT, MILES_COMMIT
from bench.miles_oracle_corpus import case_config, make_fixtures
from ppodeck import IMPORT_ROOT
from ppodeck.engine.miles.parser_gate import gate_setup, judge

ENV = CACHE / f"env-{MILES_COMMIT[:9]}-{MEGATRON_COMMIT[:9]}"
CASE = {"id": "target:hf-matches", "preset": "qwen3-4b-ppo", "sets": [], "env": {}}


def _timed(call) -> tuple[float, object]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def _validate(root: Path, home: Path, gate: bool, cached: bool = False) -> float:
    """One `ppodeck validate --engine miles` in a new process; its wall time."""
    sets = [f"hf-checkpoint={root}/hf/{CASE['preset']}", f"ref-load={root}/ref",
            f"prompt-data={root}/prompts.jsonl"]
    argv = [sys.executable, "-m", "ppodeck", "validate", CASE["preset"], "--engine", "miles",
            "--json", *[a for item in sets for a in ("--set", item)]]
    if gate:
        argv += ["--miles-root", str(ENV / "src" / "miles"), "--miles-python",
                 str(ENV / "venv" / "bin" / "python"), "--miles-parser-timeout", "300"]
    env = {**os.environ, "PPODECK_HOME": str(home),
           "PPODECK_MEGATRON_PATH": str(ENV / "src" / "megatron")}
    seconds, done = _timed(lambda: subprocess.run(argv, capture_output=True, text=True, env=env,
                                                  cwd=IMPORT_ROOT, check=False))
    accepted = '"miles.own_parser_accepts"' in done.stdout
    if gate and (not accepted or cached != ("cached verdict" in done.stdout)):
        sys.exit(f"parser_gate_bench: the gate did not accept the case (cached: {cached}): "
                 f"{done.stdout[-2000:]}"
                 f"{done.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not (ENV / "ready").exists():
        sys.exit(f"parser_gate_bench: no oracle environment at {ENV}; build it with "
                 "`python -m bench.miles_oracle --miles-git DIR --megatron-git DIR`")
    os.environ["PPODECK_MEGATRON_PATH"] = str(ENV / "src" / "megatron")
    setup = gate_setup(ENV / "src" / "miles", str(ENV / "venv" / "bin" / "python"), 300)
    rows: dict[str, list[float]] = {k: [] for k in (
        "gate cold", "gate cached", "validate, no gate", "validate, gate cold",
        "validate, gate cached")}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_fixtures(root, [CASE])
        config, _ = case_config(CASE, root)
        for index in range(args.rounds):
            home = root / f"home-{index}"
            os.environ["PPODECK_HOME"] = str(home)
            seconds, verdict = _timed(lambda: judge(config, setup))
            if verdict.outcome != "accept":
                sys.exit(f"parser_gate_bench: miles did not accept the case: {verdict}")
            rows["gate cold"].append(seconds)
            rows["gate cached"].append(_timed(lambda: judge(config, setup))[0])
            rows["validate, no gate"].append(_validate(root, home, gate=False))
            rows["validate, gate cached"].append(_validate(root, home, True, cached=True))
            rows["validate, gate cold"].append(_validate(root, root / f"cold-{index}", gate=True))
    print(f"miles {MILES_COMMIT[:9]}, Megatron {MEGATRON_COMMIT[:9]}, {args.rounds} round(s), "
          f"load average {os.getloadavg()[0]:.1f}")
    base = statistics.median(rows["validate, no gate"])
    for name, values in rows.items():
        median = statistics.median(values)
        added = f"  (+{median - base:.2f} s over no gate)" if name.startswith("validate, g") \
            else ""
        print(f"  {name:24} median {median:7.3f} s  [{', '.join(f'{v:.3f}' for v in values)}]"
              f"{added}")


if __name__ == "__main__":
    main()
