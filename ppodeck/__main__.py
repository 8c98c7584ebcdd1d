"""`python -m ppodeck` runs the ppodeck CLI."""

from __future__ import annotations

from ppodeck.app.cli import main

main()
