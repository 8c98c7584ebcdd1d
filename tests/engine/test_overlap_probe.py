"""bench/gpu_overlap_probe.py --smoke (CPU, tiny): it runs once on the H200 to say whether a move
in one process overlaps another process's kernels, so its every part must run here first."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


# A GPU bench's CPU smoke run: it checks the bench tool, not what PPO Deck ships, so it runs
# with the nightly bench (`make nightly`) and before a device session (`pytest -m slow -k
# smoke`), not in every CI run.
@pytest.mark.slow
def test_overlap_probe_smoke_runs(capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import gpu_overlap_probe as probe

    assert probe.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    for row in ("compute, ms per GEMM", "copy, GB/s", "two processes at once"):
        assert row in out
