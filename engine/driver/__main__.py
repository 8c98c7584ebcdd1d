"""`python -m engine.driver --run-dir D`: the driver process (engine/driver/ppo.py)."""

from __future__ import annotations

import sys

from engine.driver.ppo import main

sys.exit(main())
