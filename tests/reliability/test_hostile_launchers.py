"""Hostile miles launchers and launch scripts get an answer within 5 s of CPU and 1 GiB, naming
the line.

Each launcher of tests/reliability/hostile_launchers is read through `ppodeck validate
--from-command` in a forked child (the CLI already imported, so the figure is the read, not
Python's start-up) under an address-space limit of 1 GiB above what the child holds at the fork:
a reader without bounds would end in MemoryError there instead of taking the machine. The child
reports its CPU seconds, wall seconds and peak resident growth (VmHWM after clear_refs).

CPU time, not wall time, is the 5 s bound: the machine is shared, and wall time measures the
neighbours. Both are printed (`pytest -s`) and, with PPODECK_RELIABILITY_FIGURES set, recorded.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import resource
import time
from pathlib import Path

import pytest

from tests.reliability.hostile_launchers import HOSTILE, HOSTILE_SCRIPTS, MARK, marked_line

ALL = {**{f"{n}.py": make for n, make in HOSTILE.items()},
       **{f"{n}.sh": make for n, make in HOSTILE_SCRIPTS.items()}}

GIB = 1 << 30
CPU_SECONDS = 5.0
pytestmark = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(),
                                reason="needs Linux /proc for the memory figure")


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _child(path: str, conn) -> None:  # noqa: ANN001 - a multiprocessing Connection
    from typer.testing import CliRunner

    from ppodeck.app.cli import app

    vm = _status_kib("VmSize") * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + GIB, vm + GIB))
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    rss_before = _status_kib("VmRSS")
    cpu, wall = time.process_time(), time.monotonic()
    result = CliRunner().invoke(app, ["validate", "--from-command", path])
    conn.send({"cpu": time.process_time() - cpu, "wall": time.monotonic() - wall,
               "peak_mib": (_status_kib("VmHWM") - rss_before) / 1024,
               "rc": result.exit_code, "output": result.output,
               "exception": None if result.exception is None or isinstance(
                   result.exception, SystemExit) else repr(result.exception)})
    conn.close()


def _fork_context() -> multiprocessing.context.ForkServerContext:
    """Children forked from a clean single-threaded server, with the CLI imported once there.
    A plain fork of a pytest-xdist worker copies its I/O thread's locks, and a child could
    hang on one."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["ppodeck.app.cli"])
    return context


def _read_in_child(path: Path) -> dict:
    context = _fork_context()
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(str(path), child))
    process.start()
    try:
        if not parent.poll(60):
            pytest.fail(f"{path.name}: no answer within 60 s")
        return parent.recv()
    finally:
        process.join(5)
        if process.is_alive():
            process.kill()  # our own child, by its handle


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("hostile")
    out: dict[str, dict] = {}
    for name, make in ALL.items():
        path = folder / name
        path.write_text(make(), encoding="utf-8")
        out[name] = _read_in_child(path)
    if os.environ.get("PPODECK_RELIABILITY_FIGURES"):
        from tests.reliability import helpers

        helpers.record_figure("hostile_launchers", {
            n: {k: round(a[k], 3) for k in ("cpu", "wall", "peak_mib")} for n, a in out.items()})
    for name, a in out.items():
        print(f"{name:28} cpu {a['cpu']:5.2f} s  wall {a['wall']:5.2f} s  "
              f"peak +{a['peak_mib']:6.1f} MiB  rc {a['rc']}")
    return out


@pytest.mark.parametrize("name", list(ALL))
def test_a_hostile_launcher_is_answered_in_bounds(answers: dict[str, dict], name: str) -> None:
    answer = answers[name]
    assert answer["exception"] is None, answer["exception"]
    assert "Traceback" not in answer["output"]
    assert answer["rc"] in (0, 1), answer["output"][-800:]
    assert answer["cpu"] < CPU_SECONDS, (answer["cpu"], answer["output"][-800:])
    assert answer["peak_mib"] < 1024, answer["peak_mib"]
    assert "MemoryError" not in answer["output"] and "memory for" not in answer["output"]


@pytest.mark.parametrize("name", list(ALL))
def test_a_refusal_is_one_error_naming_the_real_line(answers: dict[str, dict],
                                                     name: str) -> None:
    output = answers[name]["output"]
    errors = re.findall(r"^error +(\S+)", output, re.MULTILINE)
    assert len(errors) <= 1, (errors, output[-1500:])
    text = ALL[name]()
    if MARK in text:
        line = marked_line(text)
        assert re.search(rf"(line {line}\b|:{line}\))", output), (line, output[-1500:])
