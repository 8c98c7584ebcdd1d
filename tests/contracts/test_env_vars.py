"""Every PPODECK_* variable the code names is declared once in engine/env_vars.py, and
docs/environment.md is generated from that declaration."""

from __future__ import annotations

import re
from pathlib import Path

from ppodeck.engine.env_vars import BY_NAME, markdown

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"PPODECK_[A-Z0-9_]*")


def _names_in_code() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted([*ROOT.glob("engine/**/*.py"), *ROOT.glob("app/**/*.py")]):
        if path.name == "env_vars.py":
            continue
        for name in NAME.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def test_every_variable_the_code_names_is_declared() -> None:
    missing = {name: where for name, where in _names_in_code().items() if name not in BY_NAME}
    assert not missing, f"declare these in engine/env_vars.py: {missing}"


def test_every_declared_variable_is_named_by_the_code() -> None:
    stale = set(BY_NAME) - set(_names_in_code())
    assert not stale, f"no code reads these any more; drop them from engine/env_vars.py: {stale}"


def test_the_page_is_generated_from_the_declaration() -> None:
    page = (ROOT / "docs" / "environment.md").read_text(encoding="utf-8")
    assert page == markdown(), "regenerate: python -m ppodeck.engine.env_vars > docs/environment.md"
