"""The worker's pieces without process groups: sharding, micro-batches, TP layouts, the LR
schedule, storage offload and the settings read from args."""

from __future__ import annotations

import pytest
import torch

from ppodeck.engine.model.offload import StorageOffloader
from ppodeck.engine.train.batching import (
    build_micro_batch,
    local_positions,
    make_sample,
    plan_micro_batches,
)
from ppodeck.engine.train.settings import TrainSettings
from ppodeck.engine.train.weights import TPLayout, shard_tensor, unshard_tensors
from tests.train.worker_harness import tiny_args, tiny_batch


def test_sharding_follows_the_api_rule_and_drops_the_partial_batch() -> None:
    gbs, dp, n = 4, 2, 10
    for rank in range(dp):
        steps = local_positions(n, gbs, dp, rank)
        assert len(steps) == n // gbs
        for step, positions in enumerate(steps):
            for i in positions:
                assert i // gbs == step and (i % gbs) // (gbs // dp) == rank
    every = sorted(i for r in range(dp) for s in local_positions(n, gbs, dp, r) for i in s)
    assert every == list(range(8))


def test_sharding_refuses_a_global_batch_that_dp_does_not_divide() -> None:
    with pytest.raises(ValueError, match="multiple of the DP size"):
        local_positions(12, 6, 4, 0)


def test_fixed_micro_batches_keep_order() -> None:
    assert plan_micro_batches([5, 9, 3, 7, 2], 2, None) == [[0, 1], [2, 3], [4]]


def test_dynamic_micro_batches_respect_the_padded_token_budget() -> None:
    lengths = [7, 11, 15, 12, 30, 5]
    groups = plan_micro_batches(lengths, 1, 40)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for group in groups:
        padded = len(group) * max(lengths[i] for i in group)
        assert padded <= 40 or len(group) == 1


def test_micro_batch_points_each_response_token_at_the_output_before_it() -> None:
    batch = tiny_batch(num_samples=3)
    samples = [make_sample(batch, i) for i in range(3)]
    mb = build_micro_batch(samples, [2, 0], {"reward": [s.reward for s in samples]})
    seq = mb.tokens.shape[1]
    assert seq == max(samples[2].total_len, samples[0].total_len)
    for row, s in enumerate([samples[2], samples[0]]):
        for t in range(s.response_len):
            flat = mb.response_index[row, t].item()
            assert divmod(flat, seq) == (row, s.prompt_len + t - 1)
            assert mb.targets[row, t] == s.tokens[s.prompt_len + t]
        assert mb.loss_mask[row, s.response_len:].sum() == 0
    assert mb.extras["reward"].tolist() == [samples[2].reward, samples[0].reward]


def test_sample_validation_names_the_sample() -> None:
    batch = tiny_batch(num_samples=2)
    batch.loss_masks[1] = batch.loss_masks[1][:-1]
    with pytest.raises(ValueError, match="sample 1"):
        make_sample(batch, 1)


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("dim", [0, 1])
def test_tp_shards_round_trip(stride: int, dim: int) -> None:
    full = torch.arange(8 * 12, dtype=torch.float32).reshape(8, 12)
    layout = TPLayout(dim=dim, stride=stride)
    shards = [shard_tensor(full, layout, r, 2) for r in range(2)]
    assert torch.equal(unshard_tensors(shards, layout), full)


def test_swiglu_shards_hold_their_gate_and_up_halves() -> None:
    ffn, hidden = 8, 3
    gate = torch.arange(ffn * hidden, dtype=torch.float32).reshape(ffn, hidden)
    up = -gate
    shard = shard_tensor(torch.cat([gate, up]), TPLayout(dim=0, stride=2), 1, 2)
    assert torch.equal(shard, torch.cat([gate[4:], up[4:]]))


def _scheduler(**overrides: object):  # noqa: ANN202
    from ppodeck.engine.train.optimizer import build_scheduler

    settings = TrainSettings.from_args("actor", tiny_args(**overrides), 1, cuda=False)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
    return build_scheduler(optimizer, settings), optimizer, settings


def test_lr_warmup_then_linear_decay_counts_samples() -> None:
    scheduler, optimizer, settings = _scheduler(lr_decay_style="linear", lr_warmup_iters=2,
                                                num_rollout=5, lr=1e-3)
    assert settings.train_iters == 5 * 8 // 4
    lrs = []
    for _ in range(settings.train_iters):
        lrs.append(optimizer.param_groups[0]["lr"])
        scheduler.step(increment=settings.global_batch_size)
    assert lrs[0] == 0.0 and lrs[1] == pytest.approx(5e-4) and lrs[2] == pytest.approx(1e-3)
    assert lrs[3] < lrs[2] and optimizer.param_groups[0]["lr"] == pytest.approx(0.0)


def test_warmup_fraction_counts_against_the_decay_steps() -> None:
    scheduler, _, settings = _scheduler(lr_decay_style="cosine", lr_warmup_fraction=0.5,
                                        num_rollout=5)
    assert scheduler.lr_warmup_steps == settings.train_iters * settings.global_batch_size // 2


def test_a_decaying_lr_needs_num_rollout() -> None:
    with pytest.raises(ValueError, match="num_rollout is unknown"):
        TrainSettings.from_args("actor", tiny_args(lr_decay_style="linear", num_rollout=None),
                                1, cuda=False)
    constant = TrainSettings.from_args("actor", tiny_args(num_rollout=None), 1, cuda=False)
    assert constant.train_iters == 1


def test_critic_reads_its_own_lr_and_warmup() -> None:
    args = tiny_args(lr=1e-6, critic_lr=1e-5, lr_warmup_iters=3, critic_lr_warmup_iters=7)
    critic = TrainSettings.from_args("critic", args, 1, cuda=False)
    actor = TrainSettings.from_args("actor", args, 1, cuda=False)
    assert (critic.lr, critic.lr_warmup_iters) == (1e-5, 7)
    assert (actor.lr, actor.lr_warmup_iters) == (1e-6, 3)
    assert not actor.bf16 and TrainSettings.from_args("actor", args, 1, cuda=True).bf16


def test_settings_take_resolved_values_as_they_are() -> None:
    """No second defaults: seed 0 stays 0, the critic lr falls back to --lr in resolve() only,
    and the algorithm flags arrive unchanged."""
    args = tiny_args(seed=0, critic_lr=None, lr=2e-4, calculate_per_token_loss=True,
                     use_tis=True, tis_clip=3.0, tis_clip_low=0.1, ref_update_interval=4,
                     advantage_estimator="grpo", n_samples_per_prompt=4)
    actor = TrainSettings.from_args("actor", args, 1, cuda=False)
    critic = TrainSettings.from_args("critic", args, 1, cuda=False)
    assert actor.seed == 0 and critic.lr == 2e-4
    assert (actor.calculate_per_token_loss, actor.use_tis, actor.tis_clip, actor.tis_clip_low,
            actor.ref_update_interval) == (True, True, 3.0, 0.1, 4)
    assert actor.advantage_estimator == "grpo" and not actor.use_critic
    assert actor.train_iters == args["train_iters"] == 10 * 8 * 4 // 4
    with pytest.raises(KeyError):  # a partial dict is a caller bug, not a default
        TrainSettings.from_args("actor", {"seed": 0}, 1, cuda=False)


def test_check_refused_settings_are_asserted() -> None:
    with pytest.raises(AssertionError, match="check"):
        TrainSettings.from_args("actor", tiny_args(lr_decay_style="WSD"), 2, cuda=False)
    with pytest.raises(ValueError, match="TP\\*PP\\*CP=4"):
        TrainSettings.from_args("actor", tiny_args(context_parallel_size=2,
                                                   pipeline_model_parallel_size=2), 2,
                                cuda=False)


def test_storage_offload_frees_and_restores_through_views() -> None:
    buffer = torch.arange(12, dtype=torch.float32)
    param_view, state = buffer[:6].view(2, 3), torch.full((4,), 2.5)
    grad = torch.ones(5)
    held = StorageOffloader.for_tensors([param_view, buffer, state], [grad], "cpu")
    assert held.bytes_to_copy == 12 * 4 + 4 * 4 and held.bytes_to_free == held.bytes_to_copy + 20
    report = held.offload()
    assert report["noop"] is False and report["where"] == "cpu"
    assert buffer.untyped_storage().nbytes() == 0 and grad.untyped_storage().nbytes() == 0
    assert held.offload()["bytes"] == 0  # idempotent
    held.onload()
    assert torch.equal(param_view, torch.arange(6, dtype=torch.float32).view(2, 3))
    assert torch.equal(state, torch.full((4,), 2.5)) and torch.equal(grad, torch.zeros(5))
    host = held.keep[0].host
    moment = torch.full((3,), 7.0)  # a tensor that appears later (Adam state after step 1)
    held.track([buffer, moment], [grad], "cpu")
    assert len(held.keep) == 3 and len(held.drop) == 1
    held.offload()
    held.onload()
    assert held.keep[0].host is host  # host buffers are reused, not re-pinned
    assert torch.equal(moment, torch.full((3,), 7.0))


def test_offload_reports_the_copy_rate_apart_from_the_one_time_pinning() -> None:
    state = torch.ones(1 << 16)
    held = StorageOffloader.for_tensors([state], [], "cpu")
    first = held.offload()
    held.onload()
    second = held.offload()
    for report in (first, second):
        assert report["copy_seconds"] > 0 and report["pin_seconds"] >= 0
        assert report["seconds"] >= report["copy_seconds"] + report["pin_seconds"]
        assert report["gbps"] == pytest.approx(report["bytes"] / report["copy_seconds"] / 1e9)
    assert held.keep[0].host is not None
    back = held.onload()
    assert back["copy_seconds"] > 0 and back["alloc_seconds"] >= 0
    assert back["seconds"] >= back["copy_seconds"] + back["alloc_seconds"]
    assert back["gbps"] == pytest.approx(back["bytes"] / back["copy_seconds"] / 1e9)
    assert torch.equal(state, torch.ones(1 << 16))


def test_host_buffers_reserved_ahead_serve_the_adam_moments_of_the_first_step() -> None:
    """After init's sleep the worker pins the moments' buffers ahead (reserve_host, in a
    thread); the offload after the first step takes them by size instead of pinning then,
    pins what was not reserved, and says how many bytes came pinned ahead."""
    from ppodeck.engine.model.offload import adam_state_bytes

    param = torch.nn.Parameter(torch.ones(6))
    optimizer = torch.optim.AdamW([param])
    inner = type("Chained", (), {"optimizer": optimizer})()  # a Megatron optimizer's shape
    assert adam_state_bytes(inner) == [24, 24]
    held = StorageOffloader.for_tensors([param], [], "cpu")
    assert "prepinned_bytes" not in held.offload()
    held.onload()
    held.reserve_host(adam_state_bytes(inner))
    param.grad = torch.ones(6)
    optimizer.step()
    assert adam_state_bytes(inner) == []  # the moments exist now
    reserved = held._reserving.result()
    ready = {id(t) for buffers in reserved.by_size.values() for t in buffers}
    odd = torch.ones(5)  # no buffer of its size was reserved
    held.track([*optimizer.state[param].values(), odd], [], "cpu")
    report = held.offload()
    assert report["prepinned_bytes"] == 48
    moments = [h for h in held.keep[1:] if h.nbytes == 24]  # the step counter is 4 bytes
    assert len(moments) == 2 and {id(h.host) for h in moments} == ready
    assert id(held.keep[-1].host) not in ready
    held.onload()
    assert torch.equal(odd, torch.ones(5)) and held._reserving is None
