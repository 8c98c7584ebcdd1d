"""Count the lab notes left in the source (issue #42 item 4): measured history in comments and
docstrings, and prose that names a GPU model.

    .venv/bin/python bench/lab_notes.py                 # app/ and engine/, totals per wing
    .venv/bin/python bench/lab_notes.py --list engine/train   # every hit under a folder

A lab note is a comment line that records what happened rather than why the code is so: a
date, a commit, or a measured figure (a number with a unit next to a past-tense word such as
"measured", "was", "took", "before"). Measured history belongs in docs/performance.md. A GPU
line names a GPU model in a comment or docstring; a name inside a string literal on a line
without a comment is data (a table of hardware facts) and is not counted.
"""

from __future__ import annotations

import argparse
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU = re.compile(r"\b(H100|H200|H20|A100|A10G|A10|B200|GB200|L40S?|L4|V100|T4|RTX ?\d{4}|"
                 r"MI300X?|MI250)\b")
DATE = re.compile(r"\b20\d\d-[01]\d(-[0-3]\d)?\b")
COMMIT = re.compile(r"\b(at|commit|since|before|after) [0-9a-f]{7,10}\b")
FIGURE = re.compile(r"\d(\.\d+)?\s?(s|ms|us|µs|min|GB|GiB|MB|MiB|tok/s|tokens/s|x|%)\b")
PAST = re.compile(r"\b(measured|was|were|took|cost|saved|seen|before|after|used to|went|"
                  r"dropped|rose|fell|gained|lost)\b", re.IGNORECASE)


@dataclass
class Counts:
    comment_lines: int = 0
    docstring_lines: int = 0
    lab_comments: list[str] = field(default_factory=list)
    lab_docstrings: list[str] = field(default_factory=list)
    gpu_lines: list[str] = field(default_factory=list)

    def add(self, other: Counts) -> None:
        self.comment_lines += other.comment_lines
        self.docstring_lines += other.docstring_lines
        self.lab_comments += other.lab_comments
        self.lab_docstrings += other.lab_docstrings
        self.gpu_lines += other.gpu_lines


def is_lab_note(text: str) -> bool:
    if DATE.search(text) or COMMIT.search(text):
        return True
    return bool(FIGURE.search(text) and PAST.search(text))


def _docstring_tokens(tokens: list[tokenize.TokenInfo]) -> set[int]:
    """Indexes of STRING tokens that stand alone as a statement (docstrings and bare strings)."""
    found, previous = set(), tokenize.NEWLINE
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.STRING and previous in (tokenize.NEWLINE, tokenize.INDENT,
                                                        tokenize.DEDENT, tokenize.NL):
            found.add(i)
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            previous = tok.type
    return found


def count_file(path: Path) -> Counts:
    counts = Counts()
    source = path.read_text(encoding="utf-8")
    where = path.relative_to(ROOT)
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    docstrings = _docstring_tokens(tokens)
    gpu_rows: set[int] = set()
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.COMMENT:
            counts.comment_lines += 1
            if is_lab_note(tok.string):
                counts.lab_comments.append(f"{where}:{tok.start[0]}: {tok.string.strip()}")
            if GPU.search(tok.string):
                gpu_rows.add(tok.start[0])
        elif i in docstrings:
            for offset, line in enumerate(tok.string.splitlines()):
                counts.docstring_lines += 1
                row = tok.start[0] + offset
                if is_lab_note(line):
                    counts.lab_docstrings.append(f"{where}:{row}: {line.strip()}")
                if GPU.search(line):
                    gpu_rows.add(row)
    lines = source.splitlines()
    counts.gpu_lines = [f"{where}:{row}: {lines[row - 1].strip()}" for row in sorted(gpu_rows)]
    return counts


def count_tree(folder: Path, recursive: bool = True) -> Counts:
    total = Counts()
    for path in sorted(folder.rglob("*.py") if recursive else folder.glob("*.py")):
        total.add(count_file(path))
    return total


def _per_1000(hits: int, lines: int) -> float:
    return 1000 * hits / lines if lines else 0.0


def report(folders: list[str]) -> list[str]:
    rows = [f"{'folder':<24}{'comments':>9}{'lab':>6}{'/1000':>8}{'docstr':>8}{'lab':>6}"
            f"{'/1000':>8}{'GPU':>6}"]
    grand = Counts()
    for name in folders:
        # "engine/" alone: its loose modules (the wings have rows of their own)
        c = count_tree(ROOT / name.rstrip("/"), recursive=not name.endswith("/"))
        grand.add(c)
        rows.append(_row(name, c))
    rows.append(_row("total", grand))
    return rows


def _row(name: str, c: Counts) -> str:
    return (f"{name:<24}{c.comment_lines:>9}{len(c.lab_comments):>6}"
            f"{_per_1000(len(c.lab_comments), c.comment_lines):>8.1f}{c.docstring_lines:>8}"
            f"{len(c.lab_docstrings):>6}{_per_1000(len(c.lab_docstrings), c.docstring_lines):>8.1f}"
            f"{len(c.gpu_lines):>6}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--list", metavar="FOLDER", help="print every hit under FOLDER")
    args = parser.parse_args()
    if args.list:
        c = count_tree(ROOT / args.list)
        for title, hits in (("lab-note comments", c.lab_comments),
                            ("lab-note docstring lines", c.lab_docstrings),
                            ("GPU-model lines", c.gpu_lines)):
            print(f"## {title}: {len(hits)}")
            print("\n".join(hits))
        return
    wings = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "engine").iterdir()
                   if p.is_dir() and not p.name.startswith("__"))
    print("\n".join(report(["app", "engine/", *wings])))


if __name__ == "__main__":
    main()
