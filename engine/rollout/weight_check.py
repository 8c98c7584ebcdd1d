"""--ci-test's weight-update check, the rollout side's half (engine/driver/ci_checks.py is the
driver's): inside the rollout manager, on its model. As miles' check_weights: zero the model
before the first push, compare what arrived with what was sent, digest every push.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any


def reset_tensors(model: Any) -> None:  # noqa: ANN401
    """miles' reset_tensors: zero the rollout model, so a tensor the push misses shows."""
    import torch

    with torch.no_grad():
        for tensor in model.state_dict().values():
            tensor.zero_()


def compare_loaded(model: Any, sent: Mapping[str, Any]) -> dict[str, Any]:  # noqa: ANN401
    """Every tensor the rollout model holds against what was sent (cast to its dtype)."""
    state = model.state_dict()
    mismatched = [name for name, tensor in sent.items()
                  if name not in state
                  or not state[name].equal(tensor.to(state[name].device, state[name].dtype))]
    return {"checked": len(sent), "mismatched": mismatched}


def digest(tensors: Mapping[str, Any]) -> str:  # noqa: ANN401
    """sha256 over names and bytes: equal digests mean bit-identical weights."""
    import torch

    hasher = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().contiguous().cpu()
        hasher.update(name.encode())
        hasher.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return hasher.hexdigest()
