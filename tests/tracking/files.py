"""Read back what wandb (offline) and TensorBoard wrote, with no service and no network.

wandb's .wandb file is a LevelDB-style log (a 7-byte ":W&B" header, 32 KiB blocks of records
with a 7-byte header: crc32c, length, type) of wandb_internal_pb2.Record protobufs; TensorBoard
files are TFRecords (length, crc, data, crc) of Event protobufs.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

WANDB_BLOCK = 32 * 1024
WANDB_HEADER = 7
FULL, LAST = 1, 4


def wandb_records(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a .wandb file"
    pos, pending = WANDB_HEADER, b""
    while pos + 7 <= len(data):
        left = WANDB_BLOCK - pos % WANDB_BLOCK
        if left < 7:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (FULL, LAST):
            yield pending
            pending = b""


def read_wandb_run(run_dir: Path) -> dict[str, Any]:
    """{"run": Record.run, "history": [{key: value}], "config": {key: value}} of the one
    offline run under run_dir."""
    from wandb.proto import wandb_internal_pb2 as pb

    files = sorted(run_dir.glob("**/offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    out: dict[str, Any] = {"run": None, "history": [], "config": {}}
    for raw in wandb_records(files[0]):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["run"] = record.run
            out["config"].update({item.key: json.loads(item.value_json)
                                  for item in record.run.config.update})
        elif kind == "history":
            out["history"].append({item.key or "/".join(item.nested_key):
                                   json.loads(item.value_json) for item in record.history.item})
    return out


def read_tensorboard_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] from every events file under logdir."""
    from tensorboardX.proto import event_pb2

    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(logdir.glob("**/events.out.tfevents.*")):
        data, pos = path.read_bytes(), 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            event = event_pb2.Event()
            event.ParseFromString(data[pos + 12:pos + 12 + length])
            pos += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars
