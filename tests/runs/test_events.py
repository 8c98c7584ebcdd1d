"""EventWriter, read_events and follow(): non-blocking writes, torn lines, byte-offset tailing."""

from __future__ import annotations

import errno
import json
import math
import os
import threading
import time
from pathlib import Path

import pytest

from ppodeck.engine.run.events import SCHEMA_VERSION, EventWriter, follow, read_events


def test_events_carry_version_timestamp_and_kind(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    before = time.time()
    with EventWriter(path) as writer:
        writer.emit("log", level="info", source="test", msg="hello")
    [event], warnings = read_events(path)
    assert warnings == []
    assert event["v"] == SCHEMA_VERSION and event["kind"] == "log" and event["msg"] == "hello"
    assert before <= event["ts"] <= time.time()


def test_emit_returns_at_once_while_the_disk_is_slow(tmp_path, monkeypatch) -> None:
    """A stalled filesystem never blocks emit(): all 10,000 emits return while every write
    waits (a blocking emit would sit out the 60 s stall; no tight timing, so a busy CI machine
    cannot fail it)."""
    import threading

    real_write = EventWriter._write
    disk_back = threading.Event()

    def stalled_write(self, batch):
        disk_back.wait(timeout=60)
        real_write(self, batch)

    monkeypatch.setattr(EventWriter, "_write", stalled_write)
    writer = EventWriter(tmp_path / "events.jsonl", max_queue=20_000)
    start = time.perf_counter()
    for step in range(10_000):
        writer.emit("metrics", step_key="train/step", step=step, metrics={"train/loss": 0.1})
    assert time.perf_counter() - start < 30  # returned during the stall, not after it
    disk_back.set()
    writer.close()
    events, _ = read_events(tmp_path / "events.jsonl")
    assert [e["step"] for e in events] == list(range(10_000))
    assert writer.dropped == 0


def test_concurrent_emitters_lose_nothing_and_keep_each_threads_order(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path)

    def emit_many(thread_id: int) -> None:
        for i in range(1000):
            writer.emit("log", level="info", source=f"t{thread_id}", msg="x", seq=i)

    threads = [threading.Thread(target=emit_many, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writer.close()
    events, warnings = read_events(path)
    assert warnings == [] and len(events) == 8000
    for t in range(8):
        assert [e["seq"] for e in events if e["source"] == f"t{t}"] == list(range(1000))


def test_a_full_queue_drops_the_oldest_and_says_how_many(tmp_path, monkeypatch) -> None:
    stalled, release = threading.Event(), threading.Event()
    real_write = EventWriter._write

    def stalled_write(self, batch):
        stalled.set()
        release.wait(5)
        real_write(self, batch)

    monkeypatch.setattr(EventWriter, "_write", stalled_write)
    writer = EventWriter(tmp_path / "events.jsonl", max_queue=5)
    writer.emit("log", level="info", source="t", msg="first", seq=-1)
    assert stalled.wait(5)  # the writer thread took "first" and stalls on it
    for seq in range(20):
        writer.emit("log", level="info", source="t", msg="x", seq=seq)
    release.set()
    writer.close()
    events, _ = read_events(tmp_path / "events.jsonl")
    assert [e.get("seq") for e in events[:-1]] == [-1, 15, 16, 17, 18, 19]
    warning = events[-1]
    assert warning["kind"] == "log" and warning["level"] == "warning"
    assert warning["dropped"] == 15 and "15 events were dropped" in warning["msg"]
    assert writer.dropped == 15


def test_disk_full_sets_error_stops_writing_and_never_raises(tmp_path, monkeypatch) -> None:
    def disk_full(self, batch):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(EventWriter, "_write", disk_full)
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path)
    writer.emit("log", level="info", source="t", msg="lost")
    writer.close()
    assert writer.error is not None
    assert "No space left on device" in writer.error and str(path) in writer.error
    writer.emit("log", level="info", source="t", msg="after the error")  # a no-op, no raise
    assert not writer._thread.is_alive()


def test_unwritable_directory_fails_at_construction(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        EventWriter(tmp_path / "missing" / "events.jsonl")


def test_values_that_json_cannot_hold_are_made_safe(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    path = tmp_path / "events.jsonl"
    with EventWriter(path) as writer:
        writer.emit("metrics", step_key="train/step", step=np.int64(3), rollout_id=0, metrics={
            "train/loss": math.nan, "train/grad_norm": math.inf, "rollout/values": np.float32(1.5),
            "arr": np.array([1, 2]), "where": Path("/ckpt"),
        })
    line = path.read_text()
    assert "NaN" not in line and "Infinity" not in line
    [event], _ = read_events(path)
    assert event["step"] == 3
    assert event["metrics"] == {"train/loss": None, "train/grad_norm": None,
                                "rollout/values": 1.5, "arr": [1, 2], "where": "/ckpt"}


def _line(**fields) -> bytes:
    return json.dumps({"v": 1, "ts": 1.0, "kind": "log", **fields}).encode() + b"\n"


def test_a_torn_last_line_is_skipped_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(_line(msg="a") + _line(msg="b") + b'{"v": 1, "ts": 2.0, "ki')
    events, warnings = read_events(path)
    assert [e["msg"] for e in events] == ["a", "b"]
    assert warnings == ["events.jsonl line 3 is incomplete (torn write); skipped"]


def test_bad_lines_anywhere_are_reported_with_their_line_number(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(_line(msg="a") + b"garbage\n" + b"[1, 2]\n" + b"\xff\xfe\n" + _line(msg="b"))
    events, warnings = read_events(path)
    assert [e["msg"] for e in events] == ["a", "b"]
    assert len(warnings) == 3
    assert warnings[0].startswith("events.jsonl line 2 is not valid JSON")
    assert warnings[1].startswith("events.jsonl line 3 is not an event")
    assert warnings[2].startswith("events.jsonl line 4 is not valid JSON (not UTF-8)")


def test_events_from_a_newer_schema_are_skipped_with_one_warning(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    newer = json.dumps({"v": SCHEMA_VERSION + 1, "ts": 1.0, "kind": "log"}).encode() + b"\n"
    path.write_bytes(_line(msg="a") + newer + newer)
    events, warnings = read_events(path)
    assert [e["msg"] for e in events] == ["a"]
    assert len(warnings) == 1 and "line 2" in warnings[0] and "Upgrade ppodeck" in warnings[0]


def test_follow_waits_for_the_file_and_buffers_partial_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    stop = threading.Event()
    batches = follow(path, stop, poll_s=0.001, idle_batches=True)
    assert next(batches) == []  # the file does not exist yet
    second = _line(msg="b")
    path.write_bytes(_line(msg="a") + second[:10])
    assert [e["msg"] for e in next(batches)] == ["a"]
    assert next(batches) == []  # half a line is not an event yet
    with path.open("ab") as file:
        file.write(second[10:])
    assert [e["msg"] for e in next(batches)] == ["b"]
    stop.set()
    with path.open("ab") as file:
        file.write(_line(msg="c"))
    assert [e["msg"] for e in next(batches)] == ["c"]  # one last read after stop
    assert list(batches) == []


def test_follow_from_the_end_skips_what_is_already_there(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(_line(msg="old"))
    stop = threading.Event()
    batches = follow(path, stop, poll_s=0.001, from_start=False, idle_batches=True)
    assert next(batches) == []
    with path.open("ab") as file:
        file.write(_line(msg="new"))
    assert [e["msg"] for e in next(batches)] == ["new"]


def test_follow_reports_bad_lines_through_the_callback(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(_line(msg="a") + b"oops\n" + _line(msg="b"))
    warnings: list[str] = []
    stop = threading.Event()
    stop.set()
    events = [e for batch in follow(path, stop, on_warning=warnings.append) for e in batch]
    assert [e["msg"] for e in events] == ["a", "b"]
    assert len(warnings) == 1 and warnings[0].startswith("events.jsonl line 2 is not valid JSON")


def test_follow_sees_everything_a_live_writer_emits(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    stop = threading.Event()
    seen: list[int] = []

    def consume() -> None:
        for batch in follow(path, stop, poll_s=0.005):
            seen.extend(e["seq"] for e in batch)

    consumer = threading.Thread(target=consume)
    consumer.start()
    with EventWriter(path) as writer:
        for seq in range(2000):
            writer.emit("log", level="info", source="t", msg="x" * (seq % 50), seq=seq)
            if seq % 500 == 0:
                time.sleep(0.01)
    stop.set()
    consumer.join(5)
    assert seen == list(range(2000))
