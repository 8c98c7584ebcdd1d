"""The run's event stream: append-only JSON lines in `<run_dir>/events.jsonl`.

Failure policy (the stream is observability, it must never cost a training step):
- `EventWriter.emit` never blocks: events go on a bounded in-memory queue that a daemon thread
  drains, appends and flushes. When the queue is full the oldest event is dropped and counted;
  a `log` warning with the count is written as soon as the writer catches up.
- A write error (disk full, ...) is recorded in `EventWriter.error`, loudly, and writing stops.
  The driver checks `error` and fails the run with that message; it is never masked.
- Readers tolerate a torn last line (a writer killed mid-line) and report bad lines by number.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..vocabulary import Kind

SCHEMA_VERSION = 1
_MAX_LINE_WARNINGS = 20  # a corrupted file must not flood the screen
_READ_CHUNK = 1 << 20


class EventWriter:
    """Appends events to `path` from a background thread; `emit` returns at once.

    Fields are encoded on the writer thread, so do not mutate a dict after passing it to emit.
    Call `close()` (or use `with`) to drain the queue before the process exits.
    """

    def __init__(self, path: str | os.PathLike[str], max_queue: int = 10_000) -> None:
        self.path = Path(path)
        self.error: str | None = None  # set once, when a write fails; writing then stops
        self.dropped = 0  # events dropped because the queue was full (total)
        self._file = open(self.path, "ab")  # fail fast if the run directory is missing
        self._queue: deque[dict[str, Any]] = deque()
        self._max_queue = max_queue
        self._dropped_unreported = 0
        self._cond = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="event-writer", daemon=True)
        self._thread.start()

    def emit(self, kind: str, **fields: Any) -> None:
        event = {"v": SCHEMA_VERSION, "ts": time.time(), "kind": kind, **fields}
        with self._cond:
            if self._closing or self.error is not None:
                self.dropped += 1
                return
            if len(self._queue) >= self._max_queue:
                self._queue.popleft()
                self.dropped += 1
                self._dropped_unreported += 1
            self._queue.append(event)
            self._cond.notify()

    def close(self) -> None:
        """Write everything still queued, then stop the thread. Safe to call twice."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _run(self) -> None:
        try:
            while batch := self._next_batch():
                self._write(batch)
        except OSError as exc:
            self.error = (
                f"cannot write events to {self.path}: {exc.strerror or exc} (errno {exc.errno}); "
                "no further events are recorded (free disk space or fix permissions)."
            )
        except Exception as exc:  # a dead writer thread must still say why
            self.error = f"event writer for {self.path} failed: {exc!r}"
        finally:
            self._close_file()

    def _next_batch(self) -> list[dict[str, Any]]:
        """Block until events are queued (or close); return them all. [] means finished."""
        with self._cond:
            while not self._queue and not self._closing:
                self._cond.wait()
            batch = list(self._queue)
            self._queue.clear()
            dropped, self._dropped_unreported = self._dropped_unreported, 0
        if dropped:
            batch.append(_drop_warning(dropped))
        return batch

    def _write(self, batch: list[dict[str, Any]]) -> None:
        self._file.write(b"".join(encode_event(event) for event in batch))
        self._file.flush()

    def _close_file(self) -> None:
        try:
            self._file.close()
        except OSError:
            pass  # the error that matters is already in self.error


def _drop_warning(dropped: int) -> dict[str, Any]:
    msg = f"{dropped} events were dropped because the event writer fell behind"
    return {"v": SCHEMA_VERSION, "ts": time.time(), "kind": Kind.LOG, "level": "warning",
            "source": "events", "msg": msg, "dropped": dropped}


def encode_event(event: dict[str, Any]) -> bytes:
    """One JSON line; nan/inf become null, numpy/torch scalars plain numbers, Paths strings."""
    try:
        text = json.dumps(event, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        text = json.dumps(json_safe(event), allow_nan=False, separators=(",", ":"))
    return text.encode() + b"\n"


def json_safe(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "tolist"):  # numpy scalars/arrays, torch tensors: no import needed
        return json_safe(value.tolist())
    if hasattr(value, "__float__"):
        return json_safe(float(value))
    return str(value)


def read_events(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """All events in the file, and warnings about lines that were skipped."""
    path = Path(path)
    data = path.read_bytes()
    lines = data.split(b"\n")
    torn = lines.pop()  # b"" when the file ends with a newline
    parser = _LineParser(path.name)
    events = [e for n, line in enumerate(lines, 1) if (e := parser.parse(line, n)) is not None]
    if torn.strip():
        event = parser.parse(torn, len(lines) + 1, torn=True)
        if event is not None:
            events.append(event)
    return events, parser.warnings()


def follow(
    path: str | os.PathLike[str],
    stop: threading.Event,
    poll_s: float = 0.1,
    from_start: bool = True,
    *,
    idle_batches: bool = False,
    on_warning: Callable[[str], None] | None = None,
) -> Iterator[list[dict[str, Any]]]:
    """Yield batches of new events as the file grows, until `stop` is set.

    Tails by byte offset and only parses complete lines: a partial last line stays buffered
    until its newline arrives. The file may not exist yet. After `stop` is set one last read
    is made, so events written just before the writer exited are not lost. With
    `idle_batches`, an empty list is yielded after each poll that found nothing, so a consumer
    can do periodic work (check the driver, redraw) without a second thread.
    """
    path = Path(path)
    offset = 0 if from_start else _size(path)
    pending = b""
    parser = _LineParser(path.name, on_warning)
    while True:
        last = stop.is_set()  # set before this read began: what it finds is everything
        if _size(path) < offset:  # truncated or replaced: start over
            offset, pending, parser.line_no = 0, b"", 0
        got_any = False
        for chunk in _read_from(path, offset):
            offset += len(chunk)
            *lines, pending = (pending + chunk).split(b"\n")
            batch = [e for line in lines if (e := parser.parse(line)) is not None]
            if batch:
                got_any = True
                yield batch
        if last:
            return
        if stop.is_set():
            continue  # set while a batch was out: the writer may have added lines since
        if idle_batches and not got_any:
            yield []
        stop.wait(poll_s)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _read_from(path: Path, offset: int) -> Iterator[bytes]:
    try:
        with open(path, "rb") as file:
            file.seek(offset)
            while chunk := file.read(_READ_CHUNK):
                yield chunk
    except FileNotFoundError:
        return


class _LineParser:
    """Turns lines into events and collects warnings about the ones it skips."""

    def __init__(self, name: str, on_warning: Callable[[str], None] | None = None) -> None:
        self.name = name
        self.line_no = 0
        self._on_warning = on_warning
        self._messages: list[str] = []
        self._suppressed = 0
        self._newer: list[int] = []  # line numbers of events from a newer schema

    def parse(self, line: bytes, line_no: int | None = None, torn: bool = False) -> dict | None:
        self.line_no = line_no if line_no is not None else self.line_no + 1
        if not line.strip():
            return None
        try:
            event = json.loads(line.decode("utf-8"))  # decode first: loads() guesses UTF-16
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            reason = "is incomplete (torn write)" if torn else f"is not valid JSON ({_why(exc)})"
            self._skip(reason)
            return None
        if not isinstance(event, dict) or not isinstance(event.get("kind"), str):
            self._skip("is not an event (an object with a 'kind')")
            return None
        version = event.get("v", SCHEMA_VERSION)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            self._skip_newer(version)
            return None
        return event

    def warnings(self) -> list[str]:
        extra = [f"{self._suppressed} more bad lines in {self.name}"] if self._suppressed else []
        return self._messages + extra

    def _skip(self, reason: str) -> None:
        self._warn(f"{self.name} line {self.line_no} {reason}; skipped")

    def _skip_newer(self, version: object) -> None:
        self._newer.append(self.line_no)
        if len(self._newer) == 1:  # once per file, not once per line
            self._warn(
                f"{self.name} line {self.line_no} has event schema version {version!r}, newer "
                f"than this ppodeck reads ({SCHEMA_VERSION}); such events are skipped. "
                "Upgrade ppodeck to read them."
            )

    def _warn(self, message: str) -> None:
        if len(self._messages) >= _MAX_LINE_WARNINGS:
            self._suppressed += 1
            return
        self._messages.append(message)
        if self._on_warning is not None:
            self._on_warning(message)


def _why(exc: Exception) -> str:
    return exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
