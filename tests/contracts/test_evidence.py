"""Every GPU figure with kept evidence recomputes from it (bench/evidence.py, bench/results/)."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import evidence  # noqa: E402

DIRS = evidence.evidence_dirs([])
MAX_BYTES = 512 * 1024  # kept compressed and small: the repository carries every one


def test_there_is_evidence_to_check() -> None:
    assert DIRS, "bench/results/ has no evidence.toml"


@pytest.mark.parametrize("directory", DIRS, ids=[d.name for d in DIRS])
def test_every_quoted_figure_recomputes(directory: Path) -> None:
    lines = evidence.check(directory)
    failed = [line for line in lines if line.startswith(("MISMATCH", "ERROR"))]
    assert not failed, "\n".join(lines)
    assert sum(path.stat().st_size for path in directory.iterdir()) < MAX_BYTES


def test_a_changed_figure_is_caught(tmp_path: Path) -> None:
    copy = tmp_path / DIRS[0].name
    shutil.copytree(DIRS[0], copy)
    meta = copy / "evidence.toml"
    first_value = re.search(r"^value = (.+)$", meta.read_text(), re.M)
    assert first_value is not None
    wrong = float(first_value[1]) * 1.5 + 1
    meta.write_text(meta.read_text().replace(first_value[0], f"value = {wrong}", 1))
    assert any(line.startswith("MISMATCH") for line in evidence.check(copy))


def test_the_performance_page_and_the_evidence_name_each_other() -> None:
    page = (ROOT / "docs" / "performance.md").read_text()
    cited = set(re.findall(r"bench/results/([\w.-]+)", page))
    kept = {d.name for d in DIRS}
    assert cited <= kept, f"docs/performance.md cites missing evidence: {cited - kept}"
    assert kept <= cited, f"evidence no figure in docs/performance.md cites: {kept - cited}"
