"""ppodeck's headless CLI (typer): the root app and one module per noun, all importing downward.

root (the app, its top-level commands, the entry point) -> config, presets, runs, health,
prepare (one noun each) -> common (exit codes, messages, --set, preset loading).
`app` and `main` load app.cli.root on first use, so app.cli.common alone stays small.
"""

from __future__ import annotations

__all__ = ["app", "main"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from . import root

        return getattr(root, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
