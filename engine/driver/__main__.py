"""`python -m ppodeck.engine.driver --run-dir D`: the driver process (engine/driver/ppo.py)."""

from __future__ import annotations

import sys

from .ppo import main

sys.exit(main())
