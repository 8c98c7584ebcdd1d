"""The trainer ranks, one Ray actor class per role (the roles' interface in
docs/architecture.md; the driver wraps them with ray.remote): ActorWorker
(engine/train/actor_worker.py) and CriticWorker (critic_worker.py) over the plumbing they share
(TrainWorker, base_worker.py).

Per rollout, in miles' order (its train.py):
- critic: values with the pre-update critic (forward only) -> GAE returns -> one value-loss
  optimizer step per global batch;
- actor: ref log-probs (--use-kl-loss) and old log-probs (forward only, all samples before the
  first step) -> GAE advantages from the critic's values -> optional whitening over DP -> one PPO
  step per global batch.
No PPO epochs: later mini-steps are off-policy by the earlier ones, as in miles.

A class per role, not one class with both: a critic process never holds the actor's KL
reference or export buffer, and Ray names each process by its class (`ray::CriticWorker...`),
so driver.log and `ps` say which role a process is.
"""

from __future__ import annotations

from typing import Any

from .actor_worker import ActorWorker
from .base_worker import TrainWorker
from .critic_worker import CriticWorker
from .settings import Role

WORKERS: dict[str, type[TrainWorker]] = {"actor": ActorWorker, "critic": CriticWorker}


def worker_class(role: Role) -> type[TrainWorker]:
    if role not in WORKERS:
        raise ValueError(f"role must be 'actor' or 'critic', not {role!r}")
    return WORKERS[role]


def train_worker(role: Role, rank: int, world_size: int, master_addr: str, master_port: int,
                 args: dict[str, Any]) -> TrainWorker:
    """One rank of `role` in this process (tests and benches; the driver goes through Ray)."""
    return worker_class(role)(role, rank, world_size, master_addr, master_port, args)
