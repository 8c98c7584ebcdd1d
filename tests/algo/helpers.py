"""Random right-padded batches for comparing engine.algo with naive per-token loops."""

from __future__ import annotations

import itertools

import torch


def random_mask(generator: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """Float 0/1 mask [B, T]: random response lengths (right padding), random holes inside the
    response (masked tool output), row 1 fully masked and row 0 fully trainable."""
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    positions = torch.arange(length).reshape(1, length)
    mask = (positions < lengths.reshape(batch, 1)).double()
    holes = torch.rand(batch, length, generator=generator, dtype=torch.float64) < 0.25
    mask = mask * (~holes).double()
    mask[0] = 1.0
    if batch > 1:
        mask[1] = 0.0
    return mask


def randn(generator: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=generator, dtype=torch.float64)


def positions(shape: torch.Size) -> list[tuple[int, ...]]:
    """Every index of a tensor of this shape, row-major (for naive per-token loops)."""
    return list(itertools.product(*(range(n) for n in shape)))
