"""Unsaved editor state on disk, so edits survive a quit or a crash.

<state dir>/drafts/<preset>.toml, where the state dir is $PPODECK_STATE_DIR or
platformdirs.user_state_dir("ppodeck"). Writes are atomic (tmp file + os.replace): a crash
mid-write leaves the previous draft, never half a file.
"""

from __future__ import annotations

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


def write_draft(preset_name: str, text: str) -> Path:
    path = draft_path(preset_name)
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


def delete_draft(preset_name: str) -> None:
    draft_path(preset_name).unlink(missing_ok=True)


def has_draft(preset_name: str) -> bool:
    return draft_path(preset_name).is_file()
