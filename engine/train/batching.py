"""From a RolloutBatch to this rank's optimizer steps and right-padded micro-batches.

Sharding (docs/architecture.md, identical for actor and critic so that values line up): sample i of
the rollout, after trimming to a multiple of the global batch, belongs to optimizer step
i // gbs and, inside the step, to DP rank (i % gbs) // (gbs // dp).

Micro-batches are right-padded to their longest sample. The model output at absolute position
prompt_len + t - 1 belongs to response token t (miles' logit_processors.py), so
`response_index` points there.
No attention mask is built: with right padding the plain causal mask (which Megatron's attention
and engine.train.attention apply when given None) is exact, since real tokens never attend to
the padding after them; and None lets SDPA pick FlashAttention on GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class TrainSample:
    """One sample of this rank's shard (CPU tensors)."""

    index: int  # the rollout's sample_indices entry: the key of the values dict
    tokens: torch.Tensor  # [prompt_len + response_len] int64
    prompt_len: int
    response_len: int
    loss_mask: torch.Tensor  # [response_len] float32
    reward: float

    @property
    def total_len(self) -> int:
        return self.prompt_len + self.response_len


@dataclass
class MicroBatch:
    """Right-padded model inputs plus per-response-token tensors ([b, T], T = longest response)."""

    samples: list[int]  # positions in the rank's flat sample list
    tokens: torch.Tensor  # [b, S]
    position_ids: torch.Tensor  # [b, S]
    response_index: torch.Tensor  # [b, T] flat index into b*S of the output that predicts token t
    targets: torch.Tensor  # [b, T] the response tokens (0 on padding)
    loss_mask: torch.Tensor  # [b, T] float, 0 on padding
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # [b, T] or [b] per key
    # context parallelism (engine/train/context_parallel.py): the per-token tensors above hold
    # this CP rank's tokens only, [b, T_local]; which response token t each is, which entries
    # are real, each sample's whole-sequence loss-mask count, and the whole rows' T
    token_index: torch.Tensor | None = None
    token_valid: torch.Tensor | None = None
    sample_denoms: torch.Tensor | None = None
    full_tokens: int = 0

    @property
    def size(self) -> int:
        return len(self.samples)


def num_steps(num_samples: int, global_batch_size: int) -> int:
    """Optimizer steps in a rollout: the trailing partial global batch is dropped (miles)."""
    return num_samples // global_batch_size


def local_positions(num_samples: int, gbs: int, dp_size: int, dp_rank: int) -> list[list[int]]:
    """Per optimizer step, the rollout positions that belong to this DP rank."""
    if gbs % dp_size:
        raise ValueError(f"global batch size {gbs} is not a multiple of the DP size {dp_size}")
    per_rank = gbs // dp_size
    steps = []
    for step in range(num_steps(num_samples, gbs)):
        start = step * gbs + dp_rank * per_rank
        steps.append(list(range(start, start + per_rank)))
    return steps


def make_sample(batch, position: int) -> TrainSample:  # noqa: ANN001 - a RolloutBatch
    prompt_len = int(batch.prompt_lengths[position])
    response_len = int(batch.response_lengths[position])
    tokens = torch.as_tensor(batch.tokens[position], dtype=torch.long)
    mask = torch.as_tensor(batch.loss_masks[position], dtype=torch.float32)
    if tokens.numel() != prompt_len + response_len or mask.numel() != response_len:
        raise ValueError(
            f"sample {batch.sample_indices[position]}: {tokens.numel()} tokens, "
            f"{mask.numel()} loss-mask entries, prompt {prompt_len} + response {response_len}")
    if prompt_len < 1 or response_len < 1:
        raise ValueError(f"sample {batch.sample_indices[position]}: needs a prompt token and a "
                         "response token")
    return TrainSample(index=int(batch.sample_indices[position]), tokens=tokens,
                       prompt_len=prompt_len, response_len=response_len, loss_mask=mask,
                       reward=float(batch.rewards[position]))


def plan_micro_batches(lengths: Sequence[int], micro_batch_size: int,
                       max_tokens: int | None) -> list[list[int]]:
    """Group sample positions into micro-batches.

    Fixed size (`max_tokens` None): consecutive groups of `micro_batch_size`. Dynamic: samples,
    longest first, are packed greedily while the right-padded size (count x longest) stays
    within `max_tokens`; a sample longer than the budget gets a micro-batch of its own.
    """
    order = list(range(len(lengths)))
    if max_tokens is None:
        return [order[i:i + micro_batch_size] for i in range(0, len(order), micro_batch_size)]
    order.sort(key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    for i in order:
        if groups:
            current = groups[-1]
            longest = max(lengths[current[0]], lengths[i])
            if (len(current) + 1) * longest <= max_tokens:
                current.append(i)
                continue
        groups.append([i])
    return groups


def build_micro_batch(samples: Sequence[TrainSample], positions: list[int],
                      extras: dict[str, Sequence[torch.Tensor | float]] | None = None
                      ) -> MicroBatch:
    """Pad the samples at `positions` into one micro-batch.

    `extras` maps a name to one entry per sample of the whole list: a [response_len] tensor
    (padded to [b, T]) or a float (stacked to [b]).
    """
    chosen = [samples[p] for p in positions]
    b = len(chosen)
    seq = max(s.total_len for s in chosen)
    resp = max(s.response_len for s in chosen)
    tokens = torch.zeros(b, seq, dtype=torch.long)
    response_index = torch.zeros(b, resp, dtype=torch.long)
    targets = torch.zeros(b, resp, dtype=torch.long)
    loss_mask = torch.zeros(b, resp)
    for row, s in enumerate(chosen):
        tokens[row, :s.total_len] = s.tokens
        t = torch.arange(s.response_len)
        response_index[row, :s.response_len] = row * seq + s.prompt_len + t - 1
        targets[row, :s.response_len] = s.tokens[s.prompt_len:]
        loss_mask[row, :s.response_len] = s.loss_mask
    packed = {name: _pad_extra([values[p] for p in positions], resp)
              for name, values in (extras or {}).items()}
    return MicroBatch(
        samples=list(positions),
        tokens=tokens,
        position_ids=torch.arange(seq).unsqueeze(0).expand(b, seq).contiguous(),
        response_index=response_index,
        targets=targets,
        loss_mask=loss_mask,
        extras=packed,
    )


def _pad_extra(values: list[torch.Tensor | float], length: int) -> torch.Tensor:
    if not isinstance(values[0], torch.Tensor):
        return torch.tensor(values, dtype=torch.float32)
    out = torch.zeros(len(values), length, dtype=values[0].dtype)
    for row, v in enumerate(values):
        out[row, :v.numel()] = v
    return out


def pad_rows(rows: Sequence[torch.Tensor], length: int | None = None) -> torch.Tensor:
    """Stack 1-D tensors into a right-zero-padded [N, T] tensor."""
    length = max((r.numel() for r in rows), default=0) if length is None else length
    return _pad_extra(list(rows), length) if rows else torch.zeros(0, length)


def unpad_rows(padded: torch.Tensor, lengths: Sequence[int]) -> list[torch.Tensor]:
    return [padded[i, :n].clone() for i, n in enumerate(lengths)]
