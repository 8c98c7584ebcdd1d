"""ppodeck's headless CLI (typer): the root app and one module per noun, all importing downward.

root (the app, its top-level commands, the entry point) -> config, presets, runs, health,
prepare (one noun each) -> common (exit codes, messages, --set, preset loading).
"""

from __future__ import annotations

from app.cli.root import app, main

__all__ = ["app", "main"]
