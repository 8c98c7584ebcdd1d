"""`ppodeck` as a user meets it: the console entry point in a pseudo-terminal, keys written
to the terminal (one at a time or a whole burst in one write), the screen read back as the
bytes the app writes, escape codes stripped. Shared by tests/tui/test_pty_keys.py and
bench/tui_bench.py (which loads this file by path).
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
import tomllib
from pathlib import Path

ANSI = re.compile(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][0-9A-Za-z]|\x1b[=>]")
KEYS = {"enter": b"\r", "tab": b"\t", "backspace": b"\x7f", "escape": b"\x1b",
        "down": b"\x1b[B", "up": b"\x1b[A", "home": b"\x1b[H",
        **{f"ctrl+{letter}": bytes([ord(letter) - 96]) for letter in "fglqsty"}}


def entry_code(tree: Path) -> str:
    """Python that runs the checkout's `ppodeck` console entry point as the installed script."""
    with open(tree / "pyproject.toml", "rb") as handle:
        target = tomllib.load(handle)["project"]["scripts"]["ppodeck"]
    module, func = target.split(":")
    return (f"import sys; sys.argv[0] = 'ppodeck'; from {module} import {func}; "
            f"sys.exit({func}())")


class PtyApp:
    """One `ppodeck [args]` process on a pty of `size` (columns, rows)."""

    def __init__(self, tree: Path, env: dict[str, str], args: tuple[str, ...] = (),
                 size: tuple[int, int] = (160, 48), code: str | None = None) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
        self.started = time.monotonic()
        argv = [sys.executable, "-c", code or entry_code(tree), *args]
        # the size is the pty's: pytest-xdist's workers export COLUMNS=80 and LINES=24, which
        # Rich and Textual would take over it
        env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                                     env=dict(env, TERM="xterm-256color"), cwd=tree,
                                     start_new_session=True)
        os.close(slave)
        self.master = master
        self.raw = b""
        self.text = ""  # everything written so far, escape codes stripped
        self.mark = 0  # wait_for looks at text from here on

    def write(self, *keys: str) -> float:
        """Write the keys in one go (a burst: the terminal delivers them together); names in
        KEYS are special keys, anything else is typed as text. Returns the time written."""
        data = b"".join(KEYS.get(key, key.encode()) for key in keys)
        os.write(self.master, data)
        return time.monotonic()

    def type_slowly(self, text: str, gap_s: float) -> None:
        for char in text:
            self.write(char)
            self._read(gap_s)

    def set_mark(self) -> None:
        """From here on: what the app had written so far, all of it, is before the mark."""
        while self._read(0.02):
            pass
        self.mark = len(self.text)

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], max(0.0, timeout))
        if not ready:
            return False
        try:
            chunk = os.read(self.master, 1 << 16)
        except OSError:  # the app exited and closed its side
            return False
        self.raw += chunk
        self.text = ANSI.sub(b"", self.raw).decode("utf-8", "replace")
        return bool(chunk)

    def wait_for(self, pattern: str, timeout: float = 60.0) -> float:
        """Seconds until `pattern` (a regex) shows in what was written since the mark."""
        start = time.monotonic()
        regex = re.compile(pattern)
        while not regex.search(self.text, self.mark):
            left = timeout - (time.monotonic() - start)
            if left <= 0:
                tail = self.text[-3000:]
                raise TimeoutError(f"{pattern!r} not on the terminal after {timeout} s; "
                                   f"it shows (escape codes stripped):\n{tail}")
            if not self._read(min(left, 0.5)) and self.proc.poll() is not None:
                raise RuntimeError(f"ppodeck exited ({self.proc.returncode}) before {pattern!r}"
                                   f"; it wrote:\n{self.text[-3000:]}")
        return time.monotonic() - start

    def exit_code(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.2)
        return self.proc.wait(max(0.1, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # our child: the app restores the terminal and exits
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.close(self.master)
