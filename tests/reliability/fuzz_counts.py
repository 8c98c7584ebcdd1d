"""How many generated inputs each property test tried (for bench/reliability_figures.py)."""

from __future__ import annotations

from collections import Counter

COUNTS: Counter[str] = Counter()
