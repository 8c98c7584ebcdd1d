"""Errors at the edges: a notification for the user, the traceback in a crash log.

Handlers that touch engine code or render run data wrap their work in `guard`, so one bad
event or config never tears the app down. Under tests (headless) the error is re-raised:
a test must see the bug, not a toast.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from contextlib import contextmanager

from textual.dom import DOMNode


def write_crash_log(error: BaseException) -> str:
    import sys

    from ...engine.host.files import append_private
    from ...engine.run.secrets import scrub_secrets
    from .drafts import state_dir

    try:
        path = state_dir() / "crash.log"
        text = "".join(traceback.format_exception(error)) + "\n"
        append_private(path, scrub_secrets(text, sys.argv[1:]))
        return str(path)
    except OSError:
        return "(crash log not writable)"


@contextmanager
def guard(node: DOMNode, what: str) -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        if node.app.is_headless:
            raise
        path = write_crash_log(exc)
        node.notify(f"{what} failed: {exc!r}. Details: {path}", title="internal error",
                    severity="error", timeout=12)
