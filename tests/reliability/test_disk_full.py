"""The disk fills up under a real run: the run directory lives on a small tmpfs that the test
fills with a filler file once the first checkpoints are written.

Needs root (mount -t tmpfs); skipped with the reason otherwise.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ppodeck.engine.run.rundir import RunDir
from tests.reliability import helpers

TRACKER = "latest_checkpointed_iteration.txt"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(disk: Path, leave_bytes: int) -> None:
    """Leave about `leave_bytes` free (the filler is written, not sparse)."""
    free = shutil.disk_usage(disk).free
    try:
        with open(disk / "filler", "ab") as file:
            remaining = max(0, free - leave_bytes)
            block = b"\0" * (1 << 20)
            while remaining > 0:
                remaining -= file.write(block[:remaining])
    except OSError:  # the disk filled before the estimate (the run writes too): that is the aim
        pass


def tracker(directory: Path) -> str | None:
    try:
        return (directory / TRACKER).read_text().strip()
    except OSError:
        return None


def _start(disk: Path, started: list[int]) -> tuple[RunDir, dict[str, str], int]:
    runs_dir = disk / "runs"
    env = helpers.cli_env(runs_dir)
    rundir = helpers.start_detached(runs_dir, [
        "tiny-cpu", "--set", "num-rollout=40", "--set", "save=${RUN_DIR}/checkpoints",
        "--set", "save-interval=1"], env)
    pid = helpers.status_of(rundir)["pid"]
    started.append(pid)
    # rollout 0 is critic-only warmup: rollout 1 is the first with both models saved
    helpers.wait_until(lambda: int(tracker(rundir.checkpoints) or -1) >= 1, 240,
                       "the rollout 1 save")
    return rundir, env, pid


def _assert_checkpoint_intact(directory: Path, iteration: int, partial_ok: bool = False) -> None:
    """The tracker names a complete checkpoint at or after `iteration`. A save killed mid-write
    may leave its temp dir (`partial_ok`; the next save removes it), never a published one."""
    latest = int(tracker(directory) or -1)
    assert latest >= iteration, list(directory.iterdir())
    for done in (iteration, latest):
        final = directory / f"iter_{done:07d}"
        assert (final / "ppodeck.json").is_file() and (final / ".metadata").is_file(), final
    if not partial_ok:
        assert not list(directory.glob("*.tmp-*")), list(directory.iterdir())


# A real run to its first save, then a full disk: the nightly bench's (`slow`). The default
# suite holds each part more cheaply: tests/train/test_checkpoint.py's disk tests (refused
# before writing, a mid-write failure keeps the previous checkpoint, a write error on a full disk
# is a disk-full error), tests/engine/test_driver_run_loop.py's failed-check test (an error in
# the loop is the failed status's detail) and test_worker_death.py (a real run's failing worker
# named by role and rank, nothing left running).
@pytest.mark.slow
def test_a_checkpoint_that_does_not_fit_fails_the_run_cleanly(small_disk, started) -> None:
    rundir, env, pid = _start(small_disk, started)
    fill(small_disk, leave_bytes=400_000)  # events and status still fit; a checkpoint does not
    status = helpers.wait_final(rundir, 120)
    assert status["state"] == "failed", status
    # refused before writing, or (a save already past its space check when the disk filled)
    # failed while writing: both name the disk
    disk_named = ("not enough disk space to save a checkpoint", "disk full while writing")
    assert any(text in status["detail"] for text in disk_named), status["detail"]
    assert "critic rank 0" in status["detail"]  # which save failed
    _assert_checkpoint_intact(rundir.checkpoints_critic, 1)
    _assert_checkpoint_intact(rundir.checkpoints, 1)
    listed = helpers.ppodeck(["runs", "ls"], env)
    assert "not enough disk space" in listed.stdout or "disk full" in listed.stdout
    assert helpers.nothing_left(pid, timeout=30) == []


@pytest.mark.slow
def test_a_full_disk_under_the_event_stream_ends_the_run_with_a_reason(small_disk,
                                                                        started) -> None:
    rundir, env, pid = _start(small_disk, started)
    fill(small_disk, leave_bytes=0)
    helpers.wait_until(lambda: not helpers.alive(pid), 120, "the driver to end")
    assert helpers.nothing_left(pid, timeout=30) == []  # the reaper is done too
    status = helpers.status_of(rundir)
    # nothing can be written any more: the reaper cannot record "failed" either, and readers
    # say "lost" with the reason; if a few bytes were left, "failed" says what happened
    assert status["state"] in ("failed", "lost"), status
    assert status["detail"], status
    (small_disk / "filler").unlink(missing_ok=True)
    listed = helpers.ppodeck(["runs", "ls"], env)
    row = next(line for line in listed.stdout.splitlines() if rundir.id in line)
    assert "failed" in row or "lost" in row
    _assert_checkpoint_intact(rundir.checkpoints_critic, 1, partial_ok=True)
    assert helpers.nothing_left(pid, timeout=30) == []
