"""PPO Deck's one import name: `ppodeck.app` (CLI and TUI) and `ppodeck.engine` (the engine).

An installed wheel holds both packages inside this one, so PPO Deck claims no generic top-level
name (`app`, `engine`) that another distribution could also install. In a checkout they stay at
the repository's top level, and `ppodeck/app` and `ppodeck/engine` are links to them: the import
system and every static reader find the same files, with no import hook. Inside app/ and engine/
imports are relative, so a reader resolves each one from the file's own place in the tree."""

from __future__ import annotations

from pathlib import Path

# where `import ppodeck` is found (a checkout's root, or site-packages): the working directory of
# the processes PPO Deck starts with `python -m ppodeck...`, so their sys.path[0] adds no other
# top-level name (a wheel's ppodeck/ as cwd would make its `engine` importable bare)
IMPORT_ROOT = Path(__file__).resolve().parent.parent
