"""Import every miles Python launcher, as `ppodeck presets from-command FILE.py` does.

    .venv/bin/python bench/import_miles_launchers.py [--miles-root CHECKOUT] [--list]
        [--snapshot GIT_DIR]

The launchers are `scripts/**/run_*.py` and `examples/**/run*.py` of a miles checkout (nothing
of it is run or imported: engine.miles.py_launcher reads the text). Without --miles-root, the
bare snapshot --snapshot (default: ../.mirror/radixark+miles/repo beside this checkout) is
extracted into $TMPDIR/miles-src with `git archive HEAD | tar -x`. For each launcher: whether
the train args were found (an `U.execute_train` call reached, its train_args known), whether the
model shape resolved (--num-layers, --hidden-size, --num-attention-heads set; FSDP launchers
counted apart), and the unresolved pieces grouped by reason. The model table is the built-in
one unless --model-table-from-checkout, which reads the checkout's scripts/models as
`--miles-root` does.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ppodeck.engine.miles.script_import import import_script  # noqa: E402

SHAPE = ("num_layers", "hidden_size", "num_attention_heads")
SNAPSHOT = Path(__file__).resolve().parents[2] / ".mirror" / "radixark+miles" / "repo"
EXTRACTED = Path(tempfile.gettempdir()) / "miles-src"


def checkout(root: Path | None, snapshot: Path) -> Path:
    if root is not None:
        return root
    if not (EXTRACTED / "miles").is_dir():
        EXTRACTED.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(snapshot), "archive", "HEAD"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(EXTRACTED)], input=archive, check=True)
    return EXTRACTED


def launchers(root: Path) -> list[Path]:
    found = set(root.glob("scripts/**/run_*.py")) | set(root.glob("examples/**/run*.py"))
    return sorted(p for p in found if p.is_file())


def reason(why: str) -> str:
    """The unresolved piece's reason without its particulars (names, lines)."""
    why = re.sub(r"'[^']*'|\"[^\"]*\"|\$\w+|\b\w+\.\w[\w.]*", "X", why)
    return why.split(";")[0][:70]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--miles-root", type=Path, default=None)
    parser.add_argument("--model-table-from-checkout", action="store_true")
    parser.add_argument("--list", action="store_true", help="one line per launcher")
    parser.add_argument("--snapshot", type=Path, default=SNAPSHOT,
                        help="a bare git repository of miles, extracted when no --miles-root")
    args = parser.parse_args()
    root = checkout(args.miles_root, args.snapshot)
    counts: collections.Counter[str] = collections.Counter(dict.fromkeys(
        ("launchers", "read as a Python launcher", "train args found", "  of which Megatron",
         "  Megatron with the model shape resolved",
         "  of which FSDP (no Megatron shape needed)", "no unresolved piece"), 0))
    reasons: collections.Counter[str] = collections.Counter()
    problems: collections.Counter[str] = collections.Counter()
    started = time.perf_counter()
    for path in launchers(root):
        name = str(path.relative_to(root))
        report = import_script(path.read_text(errors="replace"), env={}, path=path,
                               miles_root=root if args.model_table_from_checkout else None)
        counts["launchers"] += 1
        counts["read as a Python launcher"] += report.language == "python"
        found = report.train_line is not None and any(
            w.startswith("--") for w in _argv(report))
        counts["train args found"] += found
        values = report.config.values
        fsdp = values.get("train_backend") == "fsdp"
        shaped = all(values.get(d) is not None for d in SHAPE)
        if found and fsdp:
            counts["  of which FSDP (no Megatron shape needed)"] += 1
        elif found:
            counts["  of which Megatron"] += 1
            counts["  Megatron with the model shape resolved"] += shaped
        counts["no unresolved piece"] += found and not report.unresolved
        for item in report.unresolved:
            reasons[reason(item.why)] += 1
        for problem in report.problems:
            problems[reason(problem)] += 1
        if args.list:
            print(f"{name}: train={'yes' if found else 'NO'} "
                  f"shape={'fsdp' if fsdp else 'yes' if shaped else 'NO'} "
                  f"flags={len(values)} unresolved={len(report.unresolved)}"
                  + (f" problem={report.problems[0][:90]}" if report.problems else ""))
    elapsed = time.perf_counter() - started
    print(f"miles checkout: {root}")
    for key, value in counts.items():
        print(f"{key:45} {value}")
    print(f"{'seconds for all':45} {elapsed:.2f}")
    print("\nwhy static reading was not enough (launchers):")
    for why, number in problems.most_common():
        print(f"  {number:4}  {why}")
    print("\nunresolved pieces, by reason:")
    for why, number in reasons.most_common():
        print(f"  {number:4}  {why}")
    return 0


def _argv(report: object) -> list[str]:
    from ppodeck.engine.config.argv import to_argv

    return to_argv(report.config)  # type: ignore[attr-defined]


if __name__ == "__main__":
    raise SystemExit(main())
