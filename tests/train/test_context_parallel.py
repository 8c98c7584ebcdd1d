"""Context parallelism (engine/train/context_parallel.py) and sequence parallelism on CPU ranks.

Default suite: the zigzag split and its inverse (pure), the CP attention against whole-sequence
causal attention forward and backward over gloo, and one PPO round (critic then actor) at CP=2
against one rank. Slow: 3 rollouts at CP2, TP1 x PP2 x CP2 (the seed's topology) and TP2 x CP2
with --sequence-parallel, every metric of every step against one rank; checkpoints saved at one
CP size and resumed at another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from ppodeck.engine.train.batching import TrainSample, build_micro_batch
from ppodeck.engine.train.context_parallel import (
    local_positions,
    rank_lengths,
    scatter_token_rows,
    shard_micro_batch,
)
from tests.train.worker_harness import all_values, run_ranks, tiny_args, tiny_batch

pytestmark = pytest.mark.timeout(600)

TOL = 1e-5
ROLLOUTS = 3


# --------------------------------------------------------------------------------------------
# the split (no process group)
# --------------------------------------------------------------------------------------------
def test_each_rank_keeps_chunk_r_and_its_mirror() -> None:
    assert local_positions(8, 2, 0).tolist() == [0, 1, 6, 7]
    assert local_positions(8, 2, 1).tolist() == [2, 3, 4, 5]
    every = torch.cat([local_positions(12, 3, r) for r in range(3)])
    assert sorted(every.tolist()) == list(range(12))
    with pytest.raises(ValueError, match="multiple of 2\\*CP"):
        local_positions(6, 2, 0)


def test_token_budget_counts_what_one_cp_rank_holds() -> None:
    """--max-tokens-per-gpu 12 at CP2: rows of 21 and 22 tokens hold 12 per rank (padded to
    24): they fit one at a time; at CP1 neither fits with another."""
    from ppodeck.engine.train.batching import plan_micro_batches

    lengths = [21, 22, 9, 7]
    assert rank_lengths(lengths, 2, 4) == [12, 12, 6, 4]
    assert plan_micro_batches(rank_lengths(lengths, 2, 4), 1, 12) == [[0], [1], [2, 3]]
    assert plan_micro_batches(rank_lengths(lengths, 1, 1), 1, 24) == [[1], [0], [2, 3]]


def _samples() -> list[TrainSample]:
    """Lengths 7, 10 and 5: none a multiple of 4; a loss-mask hole; a 1-token prompt."""
    gen = torch.Generator().manual_seed(0)
    shapes = [(3, 4), (4, 6), (1, 4)]
    out = []
    for i, (prompt, response) in enumerate(shapes):
        mask = torch.ones(response)
        mask[1] = 0.0 if i == 1 else 1.0
        out.append(TrainSample(index=i, tokens=torch.randint(0, 32, (prompt + response,),
                                                             generator=gen),
                               prompt_len=prompt, response_len=response, loss_mask=mask,
                               reward=1.0))
    return out


@pytest.mark.parametrize("cp", [2, 3])
def test_shards_cover_every_response_token_once(cp: int) -> None:
    samples = _samples()
    advantages = [torch.arange(s.response_len, dtype=torch.float32) + 10 * i
                  for i, s in enumerate(samples)]
    mb = build_micro_batch(samples, [0, 1, 2], {"advantages": advantages})
    shards = [shard_micro_batch(mb, samples, cp, r, 2 * cp) for r in range(cp)]
    for name, full in [("loss_mask", mb.loss_mask), ("targets", mb.targets.float()),
                       ("advantages", mb.extras["advantages"])]:
        parts = [s.extras[name] if name == "advantages" else getattr(s, name) for s in shards]
        total = sum(scatter_token_rows(p.float(), s) for p, s in zip(parts, shards, strict=True))
        assert torch.equal(total, full), name
    for shard in shards:  # per-sample means use the whole sample's token count
        assert torch.equal(shard.sample_denoms, mb.loss_mask.sum(dim=-1))
        assert shard.tokens.shape[1] * cp % (2 * cp) == 0
    # the row a rank holds: its global positions; each target is the token after its row
    for rank, shard in enumerate(shards):
        seq = shard.tokens.shape[1] * cp
        assert torch.equal(shard.position_ids[0], local_positions(seq, cp, rank))
        flat_positions = shard.position_ids.reshape(-1)
        for row in range(3):
            valid = shard.token_valid[row]
            picked = flat_positions[shard.response_index[row][valid]]
            t = shard.token_index[row][valid]
            assert torch.equal(picked, samples[row].prompt_len + t - 1)


# --------------------------------------------------------------------------------------------
# the attention, function level, over gloo
# --------------------------------------------------------------------------------------------
def _attention_body(rank: int, world: int, ports: list[int]) -> dict:
    import torch.distributed as dist
    import torch.nn.functional as F

    from ppodeck.engine.train.context_parallel import cp_attention

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{ports[0]}", rank=rank,
                            world_size=world)
    gen = torch.Generator().manual_seed(5)
    b, h, g, seq, d = 2, 4, 2, 12, 8  # grouped-query: 4 heads over 2 K/V groups
    q, k, v = (torch.randn(b, n, seq, d, generator=gen) for n in (h, g, g))
    grad_out = torch.randn(b, h, seq, d, generator=gen)
    keep = local_positions(seq, world, rank)
    local = [t[:, :, keep].clone().requires_grad_() for t in (q, k, v)]
    out = cp_attention(*local, dist.group.WORLD, scale=d ** -0.5)
    out.backward(grad_out[:, :, keep])
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    want = F.scaled_dot_product_attention(full[0], full[1].repeat_interleave(2, 1),
                                          full[2].repeat_interleave(2, 1), is_causal=True,
                                          scale=d ** -0.5)
    want.backward(grad_out)
    dist.destroy_process_group()
    return {"out": (out - want[:, :, keep]).abs().max().item(),
            "grads": [(mine.grad - ref.grad[:, :, keep]).abs().max().item()
                      for mine, ref in zip(local, full, strict=True)]}


def test_cp_attention_matches_causal_attention_forward_and_backward(tmp_path: Path) -> None:
    for result in run_ranks(2, _attention_body, tmp_path, ports=1):
        assert result["out"] < 1e-6
        assert max(result["grads"]) < 1e-6  # the K/V grads come back by reduce-scatter


# --------------------------------------------------------------------------------------------
# the worker: one PPO round at CP=2
# --------------------------------------------------------------------------------------------
def _round(rank: int, world: int, ports: list[int], overrides: dict[str, Any]) -> dict:
    """Critic then actor on one rollout (tests/train/test_worker.py's round, without export)."""
    from ppodeck.engine.train.worker import train_worker

    args, batch = tiny_args(**overrides), tiny_batch()
    critic = train_worker("critic", rank, world, "127.0.0.1", ports[0], args)
    critic.init()
    result: dict[str, Any] = {"critic": critic.train_critic(0, batch)}
    values = all_values(result["critic"]["values"])
    critic.shutdown()
    actor = train_worker("actor", rank, world, "127.0.0.1", ports[1], args)
    actor.init()
    result["actor"] = actor.train_actor(0, batch, values)
    result["state"] = actor.gather_full_state_dict()
    actor.shutdown()
    return result


@pytest.fixture(scope="module")
def one_round(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_ranks(1, _round, tmp_path_factory.mktemp("one"), {})[0]


@pytest.fixture(scope="module")
def cp2_round(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return run_ranks(2, _round, tmp_path_factory.mktemp("cp2"), {"context_parallel_size": 2})


def test_cp2_round_matches_one_rank(one_round: dict, cp2_round: list[dict]) -> None:
    assert cp2_round[1]["critic"]["values"] == {} and cp2_round[1]["state"] is None
    assert cp2_round[1]["actor"]["step_metrics"] == []  # one rank logs
    _assert_rollout_matches(one_round, cp2_round)
    _assert_states_match(one_round["state"], cp2_round[0]["state"])


# --------------------------------------------------------------------------------------------
# slow: 3 rollouts at CP2, TP1 x PP2 x CP2 and TP2 x CP2 with sequence parallelism
# --------------------------------------------------------------------------------------------
def _rollouts(rank: int, world: int, ports: list[int], overrides: dict[str, Any]) -> dict:
    """ROLLOUTS rollouts of new samples (different lengths each): the critic trains on all of
    them (its values of each), then the actor (one process group per process at a time; the
    batches do not depend on the actor, so the order changes nothing)."""
    from ppodeck.engine.train.worker import train_worker

    args = tiny_args(**overrides)
    batches = [tiny_batch(seed=rollout) for rollout in range(ROLLOUTS)]
    critic = train_worker("critic", rank, world, "127.0.0.1", ports[0], args)
    notes = critic.init()["notes"]
    critic_out = [critic.train_critic(i, batch) for i, batch in enumerate(batches)]
    values = [all_values(out["values"]) for out in critic_out]
    critic.shutdown()
    actor = train_worker("actor", rank, world, "127.0.0.1", ports[1], args)
    actor.init()
    actor_out = [actor.train_actor(i, batch, values[i]) for i, batch in enumerate(batches)]
    state = actor.gather_full_state_dict()
    actor.shutdown()
    return {"rollouts": [{"critic": c, "actor": a}
                         for c, a in zip(critic_out, actor_out, strict=True)], "state": state,
            "notes": notes}


def _run_rollouts(tmp: Path, world: int, overrides: dict[str, Any]) -> list[dict]:
    return run_ranks(world, _rollouts, tmp, overrides)


@pytest.fixture(scope="module")
def one_rank_rollouts(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return _run_rollouts(tmp_path_factory.mktemp("r1"), 1, {})


@pytest.mark.slow
@pytest.mark.parametrize("world, overrides", [
    (2, {"context_parallel_size": 2}),
    (4, {"pipeline_model_parallel_size": 2, "context_parallel_size": 2}),
    (4, {"tensor_model_parallel_size": 2, "context_parallel_size": 2,
         "sequence_parallel": True}),
    (2, {"tensor_model_parallel_size": 2, "sequence_parallel": True}),
], ids=["cp2", "pp2-cp2", "tp2-cp2-sp", "tp2-sp"])
def test_three_rollouts_match_one_rank(one_rank_rollouts: list[dict], world: int,
                                       overrides: dict[str, Any], tmp_path: Path) -> None:
    ranks = _run_rollouts(tmp_path, world, overrides)
    notes = "\n".join(ranks[0]["notes"])
    assert ("context parallelism: CP2" in notes) == ("context_parallel_size" in overrides)
    assert ("sequence parallelism" in notes) == bool(overrides.get("sequence_parallel"))
    for rollout, want in enumerate(one_rank_rollouts[0]["rollouts"]):
        _assert_rollout_matches(want, [r["rollouts"][rollout] for r in ranks])
    _assert_states_match(one_rank_rollouts[0]["state"], ranks[0]["state"])


# --------------------------------------------------------------------------------------------
# slow: checkpoints do not depend on CP
# --------------------------------------------------------------------------------------------
def _save(rank: int, world: int, ports: list[int], root: str, cp: int) -> dict:
    """Train, save, train on (no KL reference: a resume without --ref-load would take the
    loaded weights as its reference)."""
    from ppodeck.engine.train.worker import train_worker

    batch = tiny_batch()
    values = {i: [0.1] * n for i, n in enumerate(batch.response_lengths)}
    actor = train_worker("actor", rank, world, "127.0.0.1", ports[0],
                        tiny_args(context_parallel_size=cp, save=root, use_kl_loss=False))
    actor.init()
    actor.train_actor(0, batch, values)
    actor.save(1)
    next_steps = actor.train_actor(1, batch, values)["step_metrics"]
    actor.shutdown()
    return {"next": next_steps}


def _resume(rank: int, world: int, ports: list[int], root: str, cp: int) -> dict:
    from ppodeck.engine.train.worker import train_worker

    batch = tiny_batch()
    values = {i: [0.1] * n for i, n in enumerate(batch.response_lengths)}
    actor = train_worker("actor", rank, world, "127.0.0.1", ports[0],
                        tiny_args(context_parallel_size=cp, load=root, use_kl_loss=False))
    init = actor.init()
    steps = actor.train_actor(1, batch, values)["step_metrics"]
    actor.shutdown()
    return {"init": init, "next": steps}


@pytest.mark.slow
@pytest.mark.parametrize("saved_cp, resumed_cp", [(2, 1), (1, 2)])
def test_checkpoint_saved_at_one_cp_resumes_at_another(tmp_path: Path, saved_cp: int,
                                                       resumed_cp: int) -> None:
    root = str(tmp_path / "ckpt")
    saved = run_ranks(saved_cp, _save, tmp_path / "save", root, saved_cp, ports=1)[0]
    resumed = run_ranks(resumed_cp, _resume, tmp_path / "resume", root, resumed_cp, ports=1)[0]
    assert resumed["init"]["start_rollout_id"] == 2
    for want, got in zip(saved["next"], resumed["next"], strict=True):
        for key, value in want.items():
            if not key.startswith("perf/"):
                assert got[key] == pytest.approx(value, abs=TOL), key


# --------------------------------------------------------------------------------------------
# comparisons
# --------------------------------------------------------------------------------------------
def _logging(ranks: list[dict]) -> dict:
    logging = [r for r in ranks if r["critic"]["step_metrics"]]
    assert len(logging) == 1, "exactly one rank logs"
    return logging[0]


def _assert_rollout_matches(want: dict, ranks: list[dict]) -> None:
    """Every step metric (losses, clip fractions, KL, entropy, grad norms, lr), the rollout
    metrics, the critic's values and the per-token records (log-probs, advantages, returns,
    entropy) equal one rank's to float order."""
    got = _logging(ranks)
    for role in ("critic", "actor"):
        assert len(got[role]["step_metrics"]) == len(want[role]["step_metrics"])
        for step, (mine, ref) in enumerate(zip(got[role]["step_metrics"],
                                               want[role]["step_metrics"], strict=True)):
            assert set(mine) == set(ref)
            for key, value in ref.items():
                if not key.startswith("perf/"):
                    assert mine[key] == pytest.approx(value, abs=TOL, rel=TOL), (role, step, key)
        for key, value in want[role]["rollout_metrics"].items():
            assert got[role]["rollout_metrics"][key] == pytest.approx(value, abs=TOL), key
    values: dict[int, list[float]] = {}
    for r in ranks:
        values.update(r["critic"]["values"])
    assert sorted(values) == sorted(want["critic"]["values"])
    for index, row in want["critic"]["values"].items():
        assert torch.allclose(torch.tensor(values[index]), torch.tensor(row), atol=TOL), index
    assert want["actor"]["samples"] and want["critic"]["samples"]  # per-token records compared
    for role in ("critic", "actor"):
        rows: dict[int, dict[str, Any]] = {}
        for r in ranks:
            rows.update(_sample_rows(r[role].get("samples") or {}))
        for index, series in _sample_rows(want[role]["samples"]).items():
            assert rows[index].keys() == series.keys(), (role, index)
            for name, row in series.items():
                assert torch.allclose(rows[index][name], row, atol=TOL), (role, index, name)


def _sample_rows(kept: dict[str, Any]) -> dict[int, dict[str, torch.Tensor]]:
    """The worker's per-token records (index, lengths, flat series end to end) by sample."""
    if not kept:
        return {}
    names = [k for k in kept if k not in ("index", "lengths")]
    offsets = [0]
    for length in kept["lengths"]:
        offsets.append(offsets[-1] + length)
    return {index: {name: torch.as_tensor(kept[name][offsets[i]:offsets[i + 1]])
                    for name in names}
            for i, index in enumerate(kept["index"])}


def _assert_states_match(want: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(want)
    for name, tensor in want.items():
        assert torch.allclose(got[name], tensor, atol=TOL), name


def test_sequence_parallel_norm_marks_its_weight_for_the_tp_sum() -> None:
    """Megatron's local norm refuses sequence parallelism; ours is torch's, its weight marked
    so that finalize_model_grads sums its gradient over TP (each rank saw a slice)."""
    from types import SimpleNamespace

    from ppodeck.engine.train.sequence_parallel import SequenceParallelNorm

    config = SimpleNamespace(layernorm_zero_centered_gamma=False,
                             memory_efficient_layer_norm=False, normalization="RMSNorm",
                             sequence_parallel=True)
    norm = SequenceParallelNorm(config, hidden_size=8, eps=1e-6)
    assert isinstance(norm, torch.nn.RMSNorm) and norm.weight.sequence_parallel
    with pytest.raises(ValueError, match="LayerNorm or RMSNorm"):
        SequenceParallelNorm(SimpleNamespace(**{**vars(config), "normalization": "L2Norm"}), 8)


def test_transformer_config_carries_cp_communication_and_sequence_parallelism() -> None:
    """transformer-engine's CP attention (PPODECK_TE=1) reads cp_comm_type from the config:
    --allgather-cp picks all_gather, else p2p; sequence parallelism only with TP > 1."""
    from ppodeck.engine.model.shape import ModelShape
    from ppodeck.engine.train.model import transformer_config
    from ppodeck.engine.train.platform import Parallelism

    shape = ModelShape.from_args(tiny_args())
    config = transformer_config(shape, Parallelism(tp=2, pp=1, cp=2), bf16=False,
                                sequence_parallel=True, cp_comm_type="all_gather")
    assert config.cp_comm_type == "all_gather" and config.sequence_parallel
    config = transformer_config(shape, Parallelism(tp=1, pp=1, cp=1), bf16=False,
                                sequence_parallel=True, cp_comm_type="all_gather")
    assert config.cp_comm_type is None and not config.sequence_parallel


@pytest.mark.parametrize("cp", [2, 4])
def test_every_rank_chunk_attention_is_whole_sequence_causal_attention(cp: int) -> None:
    """The per-rank maths without a process group: each rank's two chunks against the whole
    K/V give its rows of plain causal attention (GQA: 4 heads over 2 groups)."""
    import torch.nn.functional as F

    from ppodeck.engine.train.context_parallel import chunk_attention

    gen = torch.Generator().manual_seed(1)
    seq, d = 8 * cp, 8
    q, k, v = (torch.randn(2, n, seq, d, generator=gen) for n in (4, 2, 2))
    want = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1),
                                          v.repeat_interleave(2, 1), is_causal=True)
    for rank in range(cp):
        keep = local_positions(seq, cp, rank)
        got = chunk_attention(q[:, :, keep], k, v, cp, rank, scale=d ** -0.5)
        assert torch.allclose(got, want[:, :, keep], atol=1e-6), rank
