"""The rm_type a prompt file's samples name in their own metadata, counted without the engine.

miles' order is that a sample's metadata `rm_type` wins over `--rm-type`; check() counts the
samples that would override the flag, so that it can say so before launch. PURE: stdlib only.
The scan reads JSONL text (a parquet file is not counted: that needs pyarrow, which check() does
not import), at most MAX_BYTES of it, and is cached by the file's size and mtime, so check()
stays fast on every keystroke.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass

MAX_BYTES = 64 << 20  # the first 64 MiB of a prompt file are counted


@dataclass(frozen=True)
class RmTypeCounts:
    counts: tuple[tuple[str, int], ...]  # (rm_type named in the metadata, samples)
    samples: int  # samples read
    complete: bool  # False: the file is larger than what was read


def metadata_rm_types(path: str | None, metadata_key: str = "metadata") -> RmTypeCounts | None:
    """The rm_types named in a JSONL prompt file's metadata; None when it cannot be read."""
    if not path or not path.endswith((".jsonl", ".json")):
        return None
    try:
        stat = os.stat(os.path.expanduser(path))
    except OSError:
        return None
    return _scan(os.path.expanduser(path), metadata_key, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _scan(path: str, metadata_key: str, _mtime_ns: int, size: int) -> RmTypeCounts | None:
    counts: dict[str, int] = {}
    samples = 0
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in _lines(handle, MAX_BYTES):
                samples += 1
                named = _named_rm_type(line, metadata_key)
                if named:
                    counts[named] = counts.get(named, 0) + 1
    except OSError:
        return None
    return RmTypeCounts(tuple(sorted(counts.items())), samples, size <= MAX_BYTES)


def _lines(handle, limit: int):  # noqa: ANN001, ANN202 - a text file; yields its lines
    read = 0
    for line in handle:
        read += len(line)
        if read > limit:
            return
        if line.strip():
            yield line


def _named_rm_type(line: str, metadata_key: str) -> str | None:
    if '"rm_type"' not in line:  # most files name none: no JSON parse per line
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    metadata = record.get(metadata_key) if isinstance(record, dict) else None
    named = metadata.get("rm_type") if isinstance(metadata, dict) else None
    return named.strip() if isinstance(named, str) and named.strip() else None
