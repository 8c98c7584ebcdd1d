"""Whether a kernel module's Triton kernels can run on a device (each module's kernel_status)."""

from __future__ import annotations

import os
from collections.abc import Callable

import torch


def triton_status(device: torch.device, build: Callable[[bool], object]) -> tuple[bool, str]:
    """(usable, why not): CUDA, or Triton's CPU interpreter (TRITON_INTERPRET=1, the tests),
    and `build(interpret)` jitting the kernels without an ImportError (Triton is optional)."""
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if device.type != "cuda" and not interpret:
        return False, f"its Triton kernels need CUDA (device {device.type})"
    try:
        build(interpret)
    except ImportError as err:
        return False, f"Triton is not importable ({err})"
    return True, "ok"
