"""The driver side: what runs in the driver process (`python -m ppodeck.engine.driver --run-dir D`).

HEAVY (ray, psutil, and through the roles torch/megatron): the PPO loop in miles' order
(ppo.py), the roles and their Ray groups (roles.py), Ray placement (cluster.py), events and
memory readings (telemetry.py, tracking.py), the checks before Ray starts (preflight.py) and
under --ci-test (ci_checks.py), and the reaper process the driver starts (reaper.py).
Front ends never import this package: engine.launch.local starts it as a subprocess, and every
module directly under engine/ stays light (tests/contracts/test_import_hygiene.py).
"""
