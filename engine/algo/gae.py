"""Token-level GAE over the trainable tokens of right-padded responses (miles semantics).

Per sample, the K trainable tokens (mask == 1) are packed to the left and treated as the only
MDP transitions: masked tokens (padding, tool output) carry no reward and no value delta, and the
GAE carry crosses them undecayed. With r the packed rewards (terminal reward added at the last
trainable token) and V_K = 0 (zero bootstrap, also for truncated responses):

    delta_t = r_t + gamma * V_{t+1} - V_t
    A_t     = delta_t + gamma * lambd * A_{t+1}
    R_t     = A_t + V_t

Results are scattered back to their response positions; masked positions get 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

_CHUNK = 128  # scan chunk: one [C, C] matmul per chunk, a short Python loop across chunks


def compute_gae(
    values: torch.Tensor,
    rewards: torch.Tensor | Sequence[float],
    mask: torch.Tensor,
    gamma: float = 1.0,
    lambd: float = 1.0,
    token_rewards: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), both [B, T], from values [B, T], scalar rewards [B] and mask [B, T].

    `token_rewards` ([B, T], e.g. -kl_coef * kl) are added on trainable tokens only. Computed in
    at least fp32 and returned in that dtype; fully masked samples get zeros and lose their reward.
    """
    dtype = torch.promote_types(values.dtype, torch.float32)
    with torch.no_grad():
        trainable = mask > 0
        slot = torch.cumsum(trainable.long(), dim=1) - 1  # packed index of each trainable token
        lengths = trainable.sum(dim=1)
        packed_values = _pack(values.to(dtype), trainable, slot)
        packed_rewards = _packed_rewards(rewards, token_rewards, trainable, slot, lengths, dtype)
        next_values = torch.nn.functional.pad(packed_values[:, 1:], (0, 1))
        deltas = packed_rewards + gamma * next_values - packed_values
        packed_adv = discounted_reverse_cumsum(deltas, gamma * lambd)
        advantages = _unpack(packed_adv, trainable, slot)
        returns = _unpack(packed_adv + packed_values, trainable, slot)
    return advantages, returns


def _pack(x: torch.Tensor, trainable: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    """Move trainable entries left (order kept); the tail is zero. Masked entries go to a spare
    column that is dropped, so V after the last trainable token is 0."""
    batch, length = x.shape
    index = torch.where(trainable, slot, torch.full_like(slot, length))
    packed = x.new_zeros(batch, length + 1)
    packed.scatter_(1, index, torch.where(trainable, x, torch.zeros_like(x)))
    return packed[:, :length]


def _unpack(packed: torch.Tensor, trainable: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    gathered = packed.gather(1, slot.clamp(min=0))
    return torch.where(trainable, gathered, torch.zeros_like(gathered))


def _packed_rewards(
    rewards: torch.Tensor | Sequence[float],
    token_rewards: torch.Tensor | None,
    trainable: torch.Tensor,
    slot: torch.Tensor,
    lengths: torch.Tensor,
    dtype: torch.dtype,
) -> torch.Tensor:
    batch, length = trainable.shape
    if token_rewards is None:
        packed = torch.zeros(batch, length, dtype=dtype, device=trainable.device)
    else:
        packed = _pack(token_rewards.to(dtype), trainable, slot)
    # The terminal reward sits on the last trainable token; fully masked samples drop it.
    terminal = torch.as_tensor(rewards, device=packed.device, dtype=dtype).reshape(batch, 1)
    terminal = torch.where(lengths.reshape(batch, 1) > 0, terminal, torch.zeros_like(terminal))
    packed.scatter_add_(1, (lengths - 1).clamp(min=0).reshape(batch, 1), terminal)
    return packed


def discounted_reverse_cumsum(x: torch.Tensor, discount: float) -> torch.Tensor:
    """y_t = sum_{k>=t} discount^(k-t) * x_k along dim 1, for x [B, T].

    Chunked scan: inside a chunk of C steps one matmul with M[i, j] = discount^(j-i) (j >= i);
    across chunks a carry y_{chunk start} propagates backwards, scaled by discount^(C-i).
    Powers never exceed C, so there is no overflow for any T (unlike a global rescaling).
    """
    batch, length = x.shape
    if length == 0:
        return x.clone()
    chunk = min(_CHUNK, length)
    num_chunks = -(-length // chunk)
    padded = torch.nn.functional.pad(x, (0, num_chunks * chunk - length))
    blocks = padded.reshape(batch, num_chunks, chunk)
    steps = torch.arange(chunk, device=x.device, dtype=x.dtype)
    gap = steps.reshape(1, chunk) - steps.reshape(chunk, 1)  # gap[i, j] = j - i
    kernel = torch.where(gap >= 0, torch.pow(discount, gap.clamp(min=0)), torch.zeros_like(gap))
    local = blocks @ kernel.T  # local[b, n, i] = sum_{j>=i in chunk} discount^(j-i) x_j
    carry_scale = torch.pow(discount, chunk - steps)  # discount^(C-i): reach the next chunk start
    out = torch.empty_like(local)
    carry = torch.zeros(batch, device=x.device, dtype=x.dtype)  # y at the next chunk's start
    for n in range(num_chunks - 1, -1, -1):
        out[:, n] = local[:, n] + carry.reshape(batch, 1) * carry_scale
        carry = out[:, n, 0]
    return out.reshape(batch, -1)[:, :length]
