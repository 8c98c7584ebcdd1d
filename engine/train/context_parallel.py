"""Context parallelism (CP) for the engine's own attention path, and the micro-batch split.

Layout, as Megatron and miles balance causal work: every right-padded row of a micro-batch is
padded to a multiple of 2*CP tokens and cut into 2*CP equal chunks; CP rank r keeps chunks r and
2*CP-1-r (in that order). Megatron's RoPE slices its table the same way
(`get_pos_emb_on_this_cp_rank`), so each token is rotated at its global position.

Attention (`cp_attention`): keys and values are all-gathered over the CP group (miles'
`--allgather-cp`), put back in global order, and each local chunk attends causally to the
global prefix that ends with it. The gather's backward is a reduce-scatter: every rank's
gradient for a K/V token is summed into the rank that holds the token, so the backward is exact.

Downstream of the model (`shard_micro_batch`): the per-response-token tensors of a micro-batch
keep only the tokens whose predicting position this rank holds, compacted into [b, T_local],
with the sample's whole-sequence loss-mask count kept for per-sample means. Forward-only outputs
come back to whole rows with `gather_token_rows` (an all-reduce of disjoint rows over CP).

With --sequence-parallel (TP > 1) each CP rank's slice is further split over TP, so rows are
padded to a multiple of 2*CP*TP.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from .batching import MicroBatch, TrainSample


# --- topology -----------------------------------------------------------------------------------
def cp_group():  # noqa: ANN201
    from megatron.core import parallel_state as ps

    return ps.get_context_parallel_group()


def cp_world() -> tuple[int, int]:
    """(CP size, CP rank); (1, 0) before Megatron's parallel state exists."""
    from megatron.core import parallel_state as ps

    if not ps.model_parallel_is_initialized():
        return 1, 0
    return ps.get_context_parallel_world_size(), ps.get_context_parallel_rank()


def row_multiple(cp: int, tp: int, sequence_parallel: bool) -> int:
    """What every padded row length must divide by: 2*CP chunks (CP > 1), each CP slice split
    evenly over TP under sequence parallelism."""
    multiple = 2 * cp if cp > 1 else 1
    return multiple * (tp if sequence_parallel and tp > 1 else 1)


def padded_length(length: int, multiple: int) -> int:
    return -(-length // multiple) * multiple


def local_positions(seq_len: int, cp: int, rank: int) -> Tensor:
    """Global positions CP rank `rank` holds of a row of `seq_len` (a multiple of 2*CP):
    chunk `rank`, then chunk 2*CP-1-rank."""
    if cp == 1:
        return torch.arange(seq_len)
    if seq_len % (2 * cp):
        raise ValueError(f"row length {seq_len} is not a multiple of 2*CP = {2 * cp}")
    chunk = seq_len // (2 * cp)
    first, second = rank * chunk, (2 * cp - 1 - rank) * chunk
    return torch.cat([torch.arange(first, first + chunk), torch.arange(second, second + chunk)])


def rank_lengths(lengths: Sequence[int], cp: int, multiple: int) -> list[int]:
    """Row lengths as one CP rank holds them (padded, then split): what --max-tokens-per-gpu
    budgets under --use-dynamic-batch-size, as in miles."""
    return [padded_length(n, multiple) // cp for n in lengths]


# --- micro-batches --------------------------------------------------------------------------------
def shard_micro_batch(mb: MicroBatch, samples: Sequence[TrainSample], cp: int, rank: int,
                      multiple: int) -> MicroBatch:
    """This rank's part of a right-padded micro-batch (see the module doc).

    Rows are padded to `multiple` (row_multiple()). Per-token tensors ([b, T]) become
    [b, T_local]: the response tokens whose predicting position (prompt_len + t - 1) is on this
    rank, in order; `token_index` says which t each is (padding entries: t = 0, mask 0). At least
    one (padding) entry per row, so a rank with no token of its own still runs the backward
    (the K/V gather's reduce-scatter needs every rank). `sample_denoms` keeps each sample's
    whole-sequence loss-mask count for per-sample means."""
    b, seq = mb.tokens.shape
    full = padded_length(seq, multiple)
    tokens = F.pad(mb.tokens, (0, full - seq))
    keep = local_positions(full, cp, rank)
    where = torch.full((full,), -1, dtype=torch.long)  # global position -> local, -1 elsewhere
    where[keep] = torch.arange(keep.numel())
    lengths = [samples[p].response_len for p in mb.samples]
    rows = [_owned_tokens(mb, row, seq, length, where) for row, length in enumerate(lengths)]
    t_local = max(1, max(len(ts) for ts, _ in rows))
    token_index = torch.zeros(b, t_local, dtype=torch.long)
    response_index = torch.zeros(b, t_local, dtype=torch.long)
    valid = torch.zeros(b, t_local, dtype=torch.bool)
    local_seq = keep.numel()
    for row, (ts, local) in enumerate(rows):
        n = len(ts)
        token_index[row, :n] = torch.tensor(ts, dtype=torch.long)
        response_index[row, :n] = row * local_seq + torch.tensor(local, dtype=torch.long)
        valid[row, :n] = True
    return replace(
        mb,
        tokens=tokens[:, keep].contiguous(),
        position_ids=keep.unsqueeze(0).expand(b, -1).contiguous(),
        response_index=response_index,
        targets=_take(mb.targets, token_index, valid),
        loss_mask=_take(mb.loss_mask, token_index, valid),
        extras={name: _take(x, token_index, valid) if x.dim() == 2 else x
                for name, x in mb.extras.items()},
        token_index=token_index,
        token_valid=valid,
        sample_denoms=mb.loss_mask.sum(dim=-1),
        full_tokens=mb.loss_mask.shape[1],
    )


def _owned_tokens(mb: MicroBatch, row: int, seq: int, length: int,
                  where: Tensor) -> tuple[list[int], list[int]]:
    """(response token t, local position) for the tokens of `row` predicted on this rank."""
    positions = mb.response_index[row, :length] - row * seq  # global predicting positions
    local = where[positions]
    owned = (local >= 0).nonzero().flatten()
    return owned.tolist(), local[owned].tolist()


def _take(x: Tensor, token_index: Tensor, valid: Tensor) -> Tensor:
    """[b, T] -> [b, T_local] at `token_index`, zero on padding entries."""
    picked = x.gather(1, token_index)
    return torch.where(valid, picked, torch.zeros_like(picked))


def scatter_token_rows(local: Tensor, mb: MicroBatch) -> Tensor:
    """[b, T_local] -> [b, T] with this rank's tokens in place and zeros elsewhere."""
    out = local.new_zeros(local.shape[0], mb.full_tokens)
    values = torch.where(mb.token_valid.to(local.device), local, torch.zeros_like(local))
    # padding entries point at t = 0 with a zero value: scatter_add leaves the owner's value
    return out.scatter_add(1, mb.token_index.to(local.device), values)


def gather_token_rows(local: Tensor, mb: MicroBatch) -> Tensor:
    """Whole [b, T] rows from every CP rank's [b, T_local] (each token is on one rank)."""
    full = scatter_token_rows(local, mb)
    dist.all_reduce(full, group=cp_group())
    return full


# --- attention ----------------------------------------------------------------------------------
class _GatherSequence(torch.autograd.Function):
    """All-gather along dim 0 over the CP group; backward: reduce-scatter (sum) to the owner."""

    @staticmethod
    def forward(ctx, local: Tensor, group) -> Tensor:  # noqa: ANN001
        ctx.group = group
        world = dist.get_world_size(group)
        out = local.new_empty((world * local.shape[0], *local.shape[1:]))
        dist.all_gather_into_tensor(out, local.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # noqa: ANN001
        world = dist.get_world_size(ctx.group)
        out = grad.new_empty((grad.shape[0] // world, *grad.shape[1:]))
        dist.reduce_scatter_tensor(out, grad.contiguous(), group=ctx.group)
        return out, None


def gather_sequence(local: Tensor, group) -> Tensor:  # noqa: ANN001
    """[s_local, ...] from every CP rank -> [cp * s_local, ...] in rank order (differentiable)."""
    return _GatherSequence.apply(local, group)


@functools.lru_cache(maxsize=64)
def global_order(seq_len: int, cp: int) -> Tensor:
    """Index that turns the rank-ordered gather of local slices into global position order
    (cached: every layer of every micro-batch asks for it)."""
    gathered = torch.cat([local_positions(seq_len, cp, r) for r in range(cp)])
    return torch.argsort(gathered)


def cp_attention(q: Tensor, k: Tensor, v: Tensor, group, scale: float,  # noqa: ANN001
                 dropout_p: float = 0.0) -> Tensor:
    """Causal attention of this rank's two query chunks against the whole sequence.

    q: [b, h, s_local, d]; k, v: [b, g, s_local, d] (g divides h: grouped-query attention).
    Returns [b, h, s_local, d]."""
    cp, rank = dist.get_world_size(group), dist.get_rank(group)
    seq_len = q.shape[2] * cp
    # one collective for K and V: [s, 2, b, g, d] with the sequence first
    kv = torch.stack([k, v]).permute(3, 0, 1, 2, 4)
    kv = gather_sequence(kv, group)
    kv = kv.index_select(0, global_order(seq_len, cp).to(kv.device))
    keys, values = kv.permute(1, 2, 3, 0, 4).unbind(0)  # [b, g, S, d] each
    return chunk_attention(q, keys, values, cp, rank, scale, dropout_p)


def chunk_attention(q: Tensor, keys: Tensor, values: Tensor, cp: int, rank: int, scale: float,
                    dropout_p: float = 0.0) -> Tensor:
    """CP rank `rank`'s queries (its chunks rank and 2*CP-1-rank, [b, h, s_local, d]) against
    the whole sequence's keys/values in global order ([b, g, S, d]): each chunk sees every key
    up to its own last token, causal inside (SDPA with a lower-right causal bias, which the
    flash and efficient kernels take)."""
    from torch.nn.attention.bias import causal_lower_right

    chunk = q.shape[2] // 2
    if keys.shape[1] != q.shape[1]:
        repeat = q.shape[1] // keys.shape[1]
        keys = keys.repeat_interleave(repeat, dim=1)
        values = values.repeat_interleave(repeat, dim=1)
    outs = []
    for part, chunk_id in enumerate((rank, 2 * cp - 1 - rank)):
        end = (chunk_id + 1) * chunk
        query = q[:, :, part * chunk:(part + 1) * chunk]
        outs.append(F.scaled_dot_product_attention(
            query, keys[:, :, :end], values[:, :, :end], dropout_p=dropout_p, scale=scale,
            attn_mask=causal_lower_right(chunk, end)))
    return torch.cat(outs, dim=2)


# --- the worker's view ----------------------------------------------------------------------------
class CPLayout:
    """What a train worker needs to know of CP (and of sequence parallelism's row padding):
    built once Megatron's parallel state exists."""

    def __init__(self, tp: int, sequence_parallel: bool) -> None:
        self.cp, self.rank = cp_world()
        self.tp, self.sequence_parallel = tp, sequence_parallel and tp > 1
        self.multiple = row_multiple(self.cp, tp, sequence_parallel)

    def describe(self, transformer_engine: bool, cp_comm_type: str) -> list[str]:
        """The run log's lines on how sequences are split (empty when they are not)."""
        lines = []
        if self.cp > 1:
            how = (f"transformer-engine's CP attention (cp_comm_type {cp_comm_type})"
                   if transformer_engine else "keys/values all-gathered over CP (SDPA)")
            lines.append(f"context parallelism: CP{self.cp}, rows padded to a multiple of "
                         f"{self.multiple}, cut in {2 * self.cp} chunks (rank r keeps r and "
                         f"{2 * self.cp - 1}-r); {how}")
        if self.sequence_parallel:
            lines.append(f"sequence parallelism: each CP slice split over TP{self.tp}")
        return lines

    @property
    def active(self) -> bool:
        """Rows are reshaped (split over CP, or padded for sequence parallelism)."""
        return self.multiple > 1

    def local(self, mb: MicroBatch, samples: Sequence[TrainSample]) -> MicroBatch:
        return shard_micro_batch(mb, samples, self.cp, self.rank, self.multiple) \
            if self.active else mb

    def plan_lengths(self, lengths: Sequence[int]) -> list[int]:
        return rank_lengths(lengths, self.cp, self.multiple)

    def whole_rows(self, local: Tensor, mb: MicroBatch) -> Tensor:
        """A forward-only [b, T_local] output back to whole [b, T] rows."""
        if mb.token_index is None:
            return local
        return gather_token_rows(local, mb) if self.cp > 1 else scatter_token_rows(local, mb)

    def sum_rows(self, rows: dict[int, Tensor]) -> None:
        """Per-sample whole rows each CP rank filled in part (zeros elsewhere): summed in place,
        in one collective. Every CP rank holds the same keys."""
        if self.cp == 1 or not rows:
            return
        keys = sorted(rows)
        flat = torch.cat([rows[k].reshape(-1) for k in keys])
        dist.all_reduce(flat, group=cp_group())
        for key, part in zip(keys, flat.split([rows[k].numel() for k in keys]), strict=True):
            rows[key].copy_(part.view_as(rows[key]))

    def seq_length(self, local_len: int) -> int:
        """The row length Megatron's schedule expects (it divides by CP itself)."""
        return local_len * self.cp
