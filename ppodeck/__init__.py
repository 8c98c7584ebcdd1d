"""PPO Deck's one import name: `ppodeck.app` (CLI and TUI) and `ppodeck.engine` (the engine).

An installed wheel holds both packages inside this one, so PPO Deck claims no generic top-level
name (`app`, `engine`) that another distribution could also install. In a checkout they stay
at the repository's top level (app/, engine/): there this package's search path also covers
the directory above it, so `ppodeck.engine` is the checkout's engine/ (one copy, one name)."""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent
_CHECKOUT = _HERE.parent
# where `import ppodeck` is found (a checkout's root, or site-packages): the working directory of
# the processes PPO Deck starts with `python -m ppodeck...`, so their sys.path[0] adds no other
# top-level name (a wheel's ppodeck/ as cwd would make its `engine` importable bare)
IMPORT_ROOT = _HERE.parent
if not (_HERE / "engine").is_dir() and (_CHECKOUT / "engine" / "__init__.py").is_file():
    __path__.append(str(_CHECKOUT))  # noqa: F821  (a package's __path__ is set by the import)
