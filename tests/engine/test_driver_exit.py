"""The driver process ends right after its exit handlers (engine/driver/__main__.py): with
main()'s code, its output flushed and every other exit handler run first, but without the
interpreter's teardown (a finalizer left for it never runs). The driver's main() is a stand-in
here; the real driver's exit codes are held by the tiny-cpu runs and tests/reliability."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ppodeck import IMPORT_ROOT

STAND_IN = """
import atexit, os, sys
from pathlib import Path
import ppodeck.engine.driver.ppo as ppo

class LeftForTeardown:  # what it needs is bound now: teardown clears module globals first
    def __init__(self):
        self.fd, self.write = os.open(sys.argv[1] + ".teardown", os.O_WRONLY | os.O_CREAT), os.write

    def __del__(self):
        self.write(self.fd, b"teardown ran")

ppo.left_for_teardown = LeftForTeardown()

def main():
    atexit.register(lambda: Path(sys.argv[1]).write_text("handler ran"))
    print("unflushed line", end="")  # a pipe: block-buffered until flushed
    return {code}

ppo.main = main
import runpy
runpy.run_module("ppodeck.engine.driver", run_name="__main__")
"""


def _driver_with(code: int, marker: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", STAND_IN.format(code=code), str(marker)],
                          cwd=IMPORT_ROOT, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": ""})


def test_the_driver_exits_with_mains_code_after_the_other_handlers(tmp_path: Path) -> None:
    for code in (0, 1):
        marker = tmp_path / f"handler-{code}"
        done = _driver_with(code, marker)
        assert done.returncode == code, done.stderr
        assert done.stdout == "unflushed line"
        assert marker.read_text() == "handler ran"
        assert Path(f"{marker}.teardown").read_text() == ""
