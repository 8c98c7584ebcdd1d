"""Where a run's events come from: our engine, or a miles dump PPO Deck watches (LIGHT).

A watched or driven miles run has `source.json` in its PPO Deck run directory, naming the dump;
engine/miles/watch.py writes it and translates the dump. Readers of a run (health, stats) ask
here, so the run wing never imports the miles wing above it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .rundir import RunDir

SOURCE_FILE = "source.json"  # in PPO Deck's run directory: which dump it watches
ENGINE = "miles"


def dump_of(rundir: RunDir) -> Path | None:
    """The miles dump a PPO Deck run watches, or None for a run of our own engine."""
    source = source_record(rundir)
    return Path(source["dump"]) if source else None


def source_record(rundir: RunDir) -> dict[str, Any] | None:
    try:
        source = json.loads((rundir.path / SOURCE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return source if isinstance(source, dict) and source.get("engine") == ENGINE else None


def is_driven(rundir: RunDir) -> bool:
    """A miles run PPO Deck launched itself (its supervisor owns status.json's state)."""
    return bool((source_record(rundir) or {}).get("driven"))


def read_meta(dump: Path) -> dict[str, Any]:
    try:
        meta = json.loads((Path(dump) / "dashboard" / "meta.json").read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def known_values(dump: Path) -> dict[str, Any]:
    """The flags a dump's meta.json records (miles keeps a few args there), by schema dest."""
    from ..config.schema import BY_DEST

    args = read_meta(dump).get("args")
    if not isinstance(args, dict):
        return {}
    return {dest: value for dest, value in args.items() if dest in BY_DEST}
