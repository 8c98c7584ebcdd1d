"""Import every launch script under a directory, as `ppodeck presets from-command FILE` does.

    .venv/bin/python bench/import_miles_scripts.py DIR [--miles-root CHECKOUT] [--list]

DIR holds miles launch scripts (*.sh), e.g. fetched from radixark/miles' scripts/ and examples/
(not committed here). Scripts with no train.py command (preparation, server launchers) are
counted apart. For the rest it prints: how many import with the model shape resolved
(--num-layers, --hidden-size, --num-attention-heads all set, as model.shape_required needs),
how many syntax warnings the importer gives against how many scripts `bash -n` rejects
(`bash -n` only parses), unresolved pieces, and the flags still unknown to the schema with the
number of scripts using each.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ppodeck.engine.miles.script_import import import_script  # noqa: E402

SHAPE = ("num_layers", "hidden_size", "num_attention_heads")


def bash_accepts(path: Path) -> bool | None:
    bash = shutil.which("bash")
    if bash is None:
        return None
    return subprocess.run([bash, "-n", str(path)], capture_output=True).returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--miles-root", type=Path, default=None)
    parser.add_argument("--list", action="store_true", help="one line per script")
    args = parser.parse_args()
    scripts = sorted(args.directory.rglob("*.sh"))
    counts: collections.Counter[str] = collections.Counter()
    unknown: collections.Counter[str] = collections.Counter()
    unresolved_kinds: collections.Counter[str] = collections.Counter()
    no_shape: list[str] = []
    started = time.perf_counter()
    for path in scripts:
        report = import_script(path.read_text(errors="replace"), env={}, path=path,
                               miles_root=args.miles_root)
        codes = [i.code for i in report.issues]
        syntax = codes.count("command.syntax_error")
        accepted = bash_accepts(path)
        counts["scripts"] += 1
        counts["bash -n rejects"] += accepted is False
        counts["syntax warnings (scripts)"] += syntax > 0
        counts["syntax warnings where bash -n accepts"] += syntax > 0 and accepted is True
        if report.train_line is None or "command.not_train_py" in codes:
            counts["no train.py command (helpers, wrappers)"] += 1
            continue
        counts["with a train.py command"] += 1
        values = report.config.values
        if values.get("train_backend") == "fsdp":
            counts["FSDP (no Megatron shape needed)"] += 1
            continue
        counts["Megatron"] += 1
        shaped = all(values.get(d) is not None for d in SHAPE)
        counts["Megatron: shape resolved"] += shaped
        if not shaped:
            no_shape.append(str(path.relative_to(args.directory)))
        counts["fully resolved (no unresolved piece)"] += not report.unresolved
        for item in report.unresolved:
            unresolved_kinds[item.why.split(":")[0][:60]] += 1
        for name in set(report.engine_classes()[2]):
            unknown[name] += 1
        if args.list:
            print(f"{path.relative_to(args.directory)}: shape={'yes' if shaped else 'NO'} "
                  f"unresolved={len(report.unresolved)} syntax={syntax} bash-n={accepted}")
    elapsed = time.perf_counter() - started
    for key, value in counts.items():
        print(f"{key:45} {value}")
    print(f"{'seconds for all (incl. bash -n)':45} {elapsed:.2f}")
    print("\nscripts with a train command but no shape:")
    for name in no_shape:
        print(f"  {name}")
    print("\nunresolved pieces in train commands, by reason:")
    for why, number in unresolved_kinds.most_common():
        print(f"  {number:4}  {why}")
    print(f"\nflags unknown to the schema ({len(unknown)}), by scripts using them:")
    for name, number in unknown.most_common():
        print(f"  {number:4}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
