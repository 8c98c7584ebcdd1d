"""How many graphs torch.compile may keep per compiled function: shared by the trainer's fused
ops (engine/train/fused.py), its layer compile (engine/train/layer_compile.py) and the
rollout's compiled decoder, so the rollout needs nothing of the trainer for it."""

from __future__ import annotations

import functools
from typing import Any

import torch

# graphs per op: widths x ranks x strides x dtypes x grad modes (see fused.CompiledOrEager)
RECOMPILE_LIMIT = 32


def raise_global_recompile_limit() -> None:
    """Where torch.compile takes no per-function budget (torch < 2.13), dynamo's global
    limit of 8 graphs per function applies; once hit, every later call pays for a failed
    guard check and a warning (milliseconds per norm call). Our inputs are
    canonicalized to ~4 graphs per op; the headroom covers dtypes and grad modes."""
    import torch._dynamo

    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, name):
            setattr(config, name, max(int(getattr(config, name)), RECOMPILE_LIMIT))
            return


@functools.cache
def own_recompile_budget() -> dict[str, Any]:
    """Where torch.compile takes them (torch >= 2.13): a budget of graphs of our own per op,
    not shared with other compiles of the function and above the global default of 8."""
    import inspect

    accepted = inspect.signature(torch.compile).parameters
    wanted = {"recompile_limit": RECOMPILE_LIMIT, "isolate_recompiles": True}
    return {name: value for name, value in wanted.items() if name in accepted}
