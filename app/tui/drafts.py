"""Unsaved editor state on disk, so edits survive a quit or a crash.

<state dir>/drafts/<preset>.toml, where the state dir is $PPODECK_STATE_DIR or
platformdirs.user_state_dir("ppodeck"). Writes are atomic (tmp file + os.replace): a crash
mid-write leaves the previous draft, never half a file.

Text typed into a field that does not parse (yet) cannot be a config value; it is kept beside
the draft in <preset>.typed.json ({flag name: text}) and shown as typed when the draft returns.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path

STATE_DIR_ENV = "PPODECK_STATE_DIR"


def state_dir() -> Path:
    override = os.environ.get(STATE_DIR_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_state_dir("ppodeck"))


def draft_path(preset_name: str) -> Path:
    stem = Path(preset_name).stem if preset_name.endswith(".toml") else preset_name
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.") or "defaults"
    return state_dir() / "drafts" / f"{slug}.toml"


def typed_path(preset_name: str) -> Path:
    return draft_path(preset_name).with_suffix(".typed.json")


def write_draft(preset_name: str, text: str, typed: dict[str, str] | None = None) -> Path:
    """The draft config, and the field texts that do not parse (removed when there are none)."""
    if typed:
        _write_atomic(typed_path(preset_name), json.dumps(typed, indent=1))
    else:
        typed_path(preset_name).unlink(missing_ok=True)
    return _write_atomic(draft_path(preset_name), text)


def _write_atomic(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_draft(preset_name: str) -> str | None:
    try:
        return draft_path(preset_name).read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        return None


def read_typed(preset_name: str) -> dict[str, str]:
    """{flag name: text as typed}; {} when there is none or it is unreadable."""
    try:
        data = json.loads(typed_path(preset_name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items()}


def delete_draft(preset_name: str) -> None:
    draft_path(preset_name).unlink(missing_ok=True)
    typed_path(preset_name).unlink(missing_ok=True)


def has_draft(preset_name: str) -> bool:
    return draft_path(preset_name).is_file()
