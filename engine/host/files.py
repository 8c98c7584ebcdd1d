"""Writing a file so that readers see the old one or the new one, never a torn one.

Presets, status.json and a rewritten events.jsonl all go through `atomic_write`. Stdlib only.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def atomic_write(path: Path, data: str | bytes, *, fsync: bool = False) -> None:
    """A temp file beside `path`, then os.replace; with `fsync` the bytes reach the disk
    first (a preset a teammate shares must survive a crash, a status update need not)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # os.open with 0o666 keeps the user's umask: team preset dirs stay readable by the team
    # (mkstemp would force 0600)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def append_private(path: Path, text: str) -> None:
    """Append to a file only its owner can read (logs may hold paths, configs, messages)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), 0o600)  # an older file may have been made with the umask's
        handle.write(text)
