"""PPO Deck's one import name: `ppodeck.app` (CLI and TUI) and `ppodeck.engine` (the engine).

An installed wheel holds both packages inside this one, so PPO Deck claims no generic top-level
name (`app`, `engine`) that another distribution could also install. In a checkout they stay
at the repository's top level (app/, engine/): there this package's search path also covers
the directory above it, so `ppodeck.engine` is the checkout's engine/ (one copy, one name)."""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent
# where `import ppodeck` is found (a checkout's root, or site-packages): the working directory of
# the processes PPO Deck starts with `python -m ppodeck...`, so their sys.path[0] adds no other
# top-level name (a wheel's ppodeck/ as cwd would make its `engine` importable bare)
IMPORT_ROOT = _HERE.parent
# in a checkout (engine/ beside this package, not inside it) the root is also this package's path
if not (_HERE / "engine").is_dir() and (IMPORT_ROOT / "engine" / "__init__.py").is_file():
    __path__.append(str(IMPORT_ROOT))  # noqa: F821  (a package's __path__ is set by the import)
