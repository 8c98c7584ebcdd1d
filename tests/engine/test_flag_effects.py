"""Honoured flags change what runs: each test runs the smallest piece of the engine a flag feeds
with the flag at two values and checks the outcome moves the expected way.

tests/contracts/flag_effects.py names these tests (and older ones elsewhere) for every honoured
flag. No Ray, no full run: a loss function, the optimizer Megatron builds, a tiny model, the
rollout manager on the synthetic task, the evaluation loop, the tracking set-up.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from ppodeck.engine.config.resolve import resolve_values
from ppodeck.engine.train.settings import TrainSettings
from tests.train.worker_harness import tiny_args

pytestmark = pytest.mark.usefixtures("megatron")  # vocab-parallel maths and model builds

# --------------------------------------------------------------------------------------------
# the actor and critic losses (engine/train/loss.py), fed TrainSettings.from_args
# --------------------------------------------------------------------------------------------
B, S, T, V = 2, 6, 4, 8  # samples, sequence, response tokens, vocab


def _micro_batch() -> Any:  # noqa: ANN401 - a MicroBatch
    from ppodeck.engine.train.batching import MicroBatch
    from ppodeck.engine.train.logprobs import token_log_probs

    gen = torch.Generator().manual_seed(0)
    # response token t of sample i is predicted by the output at i*S + 1 + t
    index = torch.tensor([[i * S + 1 + t for t in range(T)] for i in range(B)])
    targets = torch.randint(0, V, (B, T), generator=gen)

    def rand(scale: float) -> torch.Tensor:
        return torch.randn(B, T, generator=gen) * scale

    # pi_old = pi / ratio, ratios on both sides of every clip bound, both advantage signs
    logp, _ = token_log_probs(_logits(), index, targets, 1.0, False)
    ratios = torch.tensor([[1.4, 0.6, 2.0, 4.0], [1.3, 3.0, 0.7, 0.5]])
    extras = {
        "old_log_probs": logp - ratios.log(),
        "advantages": torch.tensor([[1.0, -2.0, 0.5, -1.0], [-0.5, 2.0, -1.5, 1.0]]),
        "ref_log_probs": rand(0.5) + logp,
        # exp(train - rollout): the TIS weights, on both sides of each clip bound
        "train_log_probs": logp,
        "rollout_log_probs": logp - torch.tensor([[3.0, 0.5, 1.5, 0.2], [1.05, 2.5, 1, 1]]).log(),
        "old_values": rand(1.0),
        "returns": rand(1.0),
    }
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])  # unequal lengths
    return MicroBatch(samples=list(range(B)), tokens=torch.zeros(B, S, dtype=torch.long),
                      position_ids=torch.arange(S).expand(B, S), response_index=index,
                      targets=targets, loss_mask=mask, extras=extras)


def _logits() -> torch.Tensor:
    return torch.randn(B, S, V, generator=torch.Generator().manual_seed(1)) * 2.0


def _settings(role: str = "actor", **flags: Any) -> TrainSettings:  # noqa: ANN401
    base = {"use_kl_loss": False, "entropy_coef": 0.0, "use_tis": False,
            "rollout_temperature": 1.0}  # pi_old below is set at temperature 1
    return TrainSettings.from_args(role, tiny_args(**{**base, **flags}), 1, cuda=False)


def _actor(settings: TrainSettings, with_rollout: bool = False) -> tuple[float, dict]:
    from ppodeck.engine.train.loss import actor_loss

    mb = _micro_batch()
    if not with_rollout:
        del mb.extras["rollout_log_probs"], mb.extras["train_log_probs"]
    loss, metrics = actor_loss(mb, settings, scale=1.0)(_logits())
    return float(loss), {k: float(v) for k, v in metrics.items()}


@pytest.mark.parametrize(("flags_a", "flags_b"), [
    ({"eps_clip": 0.2, "eps_clip_high": 0.2}, {"eps_clip": 0.05, "eps_clip_high": 0.2}),
    ({"eps_clip_high": 0.2}, {"eps_clip_high": 0.5}),
    ({"eps_clip_c": None}, {"eps_clip_c": 1.5}),
    ({"entropy_coef": 0.0}, {"entropy_coef": 0.5}),
    ({"use_kl_loss": False, "kl_loss_coef": 0.5}, {"use_kl_loss": True, "kl_loss_coef": 0.5}),
    ({"use_kl_loss": True, "kl_loss_coef": 0.1}, {"use_kl_loss": True, "kl_loss_coef": 0.5}),
    ({"use_kl_loss": True, "kl_loss_coef": 0.5, "kl_loss_type": "k1"},
     {"use_kl_loss": True, "kl_loss_coef": 0.5, "kl_loss_type": "k2"}),
    ({"use_kl_loss": True, "kl_loss_coef": 0.5, "use_unbiased_kl": False},
     {"use_kl_loss": True, "kl_loss_coef": 0.5, "use_unbiased_kl": True}),
    ({"rollout_temperature": 1.0}, {"rollout_temperature": 0.5}),
    ({"calculate_per_token_loss": False}, {"calculate_per_token_loss": True}),
], ids=["eps_clip", "eps_clip_high", "eps_clip_c", "entropy_coef", "use_kl_loss",
        "kl_loss_coef", "kl_loss_type", "use_unbiased_kl", "rollout_temperature",
        "calculate_per_token_loss"])
def test_ppo_flags_change_the_actor_loss(flags_a: dict, flags_b: dict) -> None:
    loss_a, _ = _actor(_settings(**flags_a))
    loss_b, _ = _actor(_settings(**flags_b))
    assert loss_a != pytest.approx(loss_b, rel=1e-4, abs=1e-6)


def test_tis_flags_weigh_the_policy_loss_by_the_clipped_rollout_ratio() -> None:
    """--use-tis multiplies by clamp(exp(train - rollout), tis_clip_low, tis_clip); the clip
    bounds move the loss; without --use-tis the rollout log-probs only feed metrics."""
    plain, plain_metrics = _actor(_settings(use_tis=False), with_rollout=True)
    on, metrics = _actor(_settings(use_tis=True, tis_clip=2.0, tis_clip_low=0.0),
                         with_rollout=True)
    tighter, _ = _actor(_settings(use_tis=True, tis_clip=1.1, tis_clip_low=0.0),
                        with_rollout=True)
    raised, _ = _actor(_settings(use_tis=True, tis_clip=2.0, tis_clip_low=0.9),
                       with_rollout=True)
    assert "train/tis" in metrics and "train/tis" not in plain_metrics
    assert len({round(x, 6) for x in (plain, on, tighter, raised)}) == 4


def test_observe_training_entropy_computes_the_entropy_without_training_on_it() -> None:
    off, off_metrics = _actor(_settings(observe_training_entropy=False))
    on, on_metrics = _actor(_settings(observe_training_entropy=True))
    assert off_metrics["train/entropy_loss"] == 0.0 < on_metrics["train/entropy_loss"]
    assert on == pytest.approx(off)  # observed, not trained on (entropy_coef 0)


def test_value_clip_bounds_the_critic_loss() -> None:
    from ppodeck.engine.train.loss import critic_loss

    def value_loss(value_clip: float) -> float:
        settings = _settings("critic", value_clip=value_clip)
        loss, _ = critic_loss(_micro_batch(), settings, scale=1.0)(
            torch.randn(B, S, 1, generator=torch.Generator().manual_seed(2)))
        return float(loss)

    assert value_loss(0.05) != pytest.approx(value_loss(10.0))


def test_log_probs_chunk_size_splits_the_log_prob_rows_and_keeps_their_values(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A memory knob: the forward-only pass takes the vocab softmax of `log_probs_chunk_size`
    response rows at a time (all at once at -1), with the same log-probs."""
    from ppodeck.engine.train import logprobs
    from ppodeck.engine.train.loss import forward_log_probs

    calls: list[int] = []
    for name in ("scale_logits", "fused_log_probs"):  # one call per chunk, either path
        original = getattr(logprobs, name)
        monkeypatch.setattr(logprobs, name, lambda *a, _f=original, **k: (
            calls.append(1), _f(*a, **k))[1])

    def run(chunk: int) -> tuple[torch.Tensor, int]:
        settings, mb, logits = _settings(log_probs_chunk_size=chunk), _micro_batch(), _logits()
        calls.clear()
        _, out = forward_log_probs(mb, settings)(logits)
        return out["log_probs"], len(calls)

    whole, whole_chunks = run(-1)
    chunked, chunks = run(3)
    assert (whole_chunks, chunks) == (1, 3)  # 8 rows: 3 + 3 + 2
    assert torch.allclose(whole, chunked)


# --------------------------------------------------------------------------------------------
# the model the trainer builds (ModelShape.from_args -> transformer_config -> build_gpt)
# --------------------------------------------------------------------------------------------
IDS = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])


def _build(flags: dict[str, Any], bf16: bool = False,  # noqa: ANN401
           recompute: dict[str, Any] | None = None) -> tuple[torch.nn.Module, Any]:
    from ppodeck.engine.model.shape import ModelShape
    from ppodeck.engine.train.model import build_gpt, transformer_config
    from ppodeck.engine.train.platform import Parallelism, device_scope

    args = tiny_args(**flags)
    shape = ModelShape.from_args(args)
    with device_scope():
        config = transformer_config(shape, Parallelism(), bf16=bf16, recompute=recompute)
        return build_gpt(shape, "actor", config, seed=7), config


def _forward(model: torch.nn.Module, train: bool = False) -> torch.Tensor:
    from ppodeck.engine.train.platform import device_scope

    seq = IDS.shape[1]
    causal = torch.triu(torch.ones(1, 1, seq, seq, dtype=torch.bool), diagonal=1)
    model.train(train)
    torch.manual_seed(0)
    with torch.no_grad(), device_scope():
        return model(IDS, torch.arange(seq).unsqueeze(0), causal).float()


def _model_signature(flags: dict[str, Any]) -> tuple[list, torch.Tensor]:  # noqa: ANN401
    torch.manual_seed(7)
    model, _ = _build(flags)
    shapes = sorted((k, tuple(v.shape)) for k, v in model.state_dict().items()
                    if not k.endswith("_extra_state"))
    return shapes, _forward(model)


def _differ(a: tuple[list, torch.Tensor], b: tuple[list, torch.Tensor]) -> bool:
    return a[0] != b[0] or a[1].shape != b[1].shape or not torch.allclose(a[1], b[1])


LEARNED = {"position_embedding_type": "learned_absolute"}


@pytest.mark.parametrize(("flags_a", "flags_b"), [
    ({}, {"num_layers": 3}),
    ({}, {"hidden_size": 96}),
    ({}, {"ffn_hidden_size": 96}),
    ({}, {"num_attention_heads": 8}),
    ({"group_query_attention": True}, {"group_query_attention": False}),
    ({}, {"num_query_groups": 4}),
    ({}, {"kv_channels": 32}),
    ({}, {"swiglu": False}),
    ({}, {"normalization": "LayerNorm"}),
    ({}, {"norm_epsilon": 0.5}),
    ({}, {"disable_bias_linear": False}),
    ({}, {"qk_layernorm": True}),
    ({}, {"add_qkv_bias": True}),
    ({}, {"position_embedding_type": "learned_absolute"}),
    ({**LEARNED, "use_rotary_position_embeddings": False},
     {**LEARNED, "use_rotary_position_embeddings": True}),
    ({}, {"rotary_base": 100}),
    ({}, {"use_rope_scaling": True}),
    ({"use_rope_scaling": True}, {"use_rope_scaling": True, "rotary_scaling_factor": 32.0}),
    ({}, {"vocab_size": 48}),
    ({}, {"untie_embeddings_and_output_weights": True}),
    ({**LEARNED}, {**LEARNED, "max_position_embeddings": 96}),
    ({**LEARNED, "max_position_embeddings": None, "seq_length": 64},
     {**LEARNED, "max_position_embeddings": None, "seq_length": 96}),
], ids=lambda flags: ",".join(f"{k}={v}" for k, v in flags.items()) or "base")
def test_model_flags_change_the_model_the_trainer_builds(flags_a: dict, flags_b: dict) -> None:
    """The tensors built or the logits of the same ids (same seed) differ."""
    assert _differ(_model_signature(flags_a), _model_signature(flags_b))


@pytest.mark.parametrize("flag", ["attention_dropout", "hidden_dropout"])
def test_dropout_flags_change_training_mode_outputs_only(flag: str) -> None:
    torch.manual_seed(7)
    model, _ = _build({flag: 0.0})
    assert torch.equal(_forward(model, train=True), _forward(model))
    torch.manual_seed(7)
    model, _ = _build({flag: 0.5})
    assert not torch.allclose(_forward(model, train=True), _forward(model))


def test_recompute_flags_reach_megatrons_config() -> None:
    """--recompute-*: Megatron re-runs the layers in backward (activation memory, on CUDA: its
    checkpointing needs the CUDA RNG tracker). The worker hands these keys to
    transformer_config as they are; this is the deepest seam that runs here."""
    from ppodeck.engine.train import base_worker

    def config(flags: dict[str, Any]) -> Any:  # noqa: ANN401
        args = tiny_args(**flags)
        return _build(flags, recompute={k: args[k] for k in base_worker._RECOMPUTE_KEYS})[1]

    plain = config({})
    full = config({"recompute_granularity": "full", "recompute_method": "uniform",
                   "recompute_num_layers": 1})
    block = config({"recompute_granularity": "full", "recompute_method": "block",
                    "recompute_num_layers": 2})
    assert plain.recompute_granularity is None and full.recompute_granularity == "full"
    assert (full.recompute_method, full.recompute_num_layers) == ("uniform", 1)
    assert (block.recompute_method, block.recompute_num_layers) == ("block", 2)


# --------------------------------------------------------------------------------------------
# the optimizer and LR schedule Megatron builds from TrainSettings (engine/train/optimizer.py)
# --------------------------------------------------------------------------------------------
def _after_two_steps(flags: dict[str, Any]) -> tuple[torch.Tensor, Any]:  # noqa: ANN401
    """The parameters after two Adam steps on fixed, different gradients."""
    from ppodeck.engine.train.optimizer import build_optimizer, wrap_ddp
    from ppodeck.engine.train.platform import device_scope

    settings = TrainSettings.from_args("actor", tiny_args(**flags), 1, cuda=False)
    torch.manual_seed(7)
    model, config = _build(flags)
    with device_scope():
        ddp = wrap_ddp(model, config, settings)
        optimizer = build_optimizer(ddp, settings)
        for step, scale in enumerate((3.0, -0.5)):
            optimizer.zero_grad()
            for i, p in enumerate(ddp.parameters()):
                g = torch.linspace(-1.0, 1.0, p.numel()).reshape(p.shape) * scale * (1 + i % 3)
                p.main_grad.copy_(g if step == 0 else g.flip(-1))
            optimizer.step()
    return torch.cat([p.detach().float().reshape(-1) for p in model.parameters()]), optimizer


@pytest.mark.parametrize(("flags_a", "flags_b"), [
    ({"lr": 1e-3}, {"lr": 1e-2}),
    ({"lr": 0.1, "weight_decay": 0.0}, {"lr": 0.1, "weight_decay": 0.5}),
    ({"adam_beta1": 0.9}, {"adam_beta1": 0.3}),
    ({"adam_beta2": 0.999}, {"adam_beta2": 0.5}),
    ({"adam_eps": 1e-8}, {"adam_eps": 1.0}),
    ({"adam_eps": 1.0, "clip_grad": 1.0}, {"adam_eps": 1.0, "clip_grad": 0.0}),  # 0: no clip
], ids=["lr", "weight_decay", "adam_beta1", "adam_beta2", "adam_eps", "clip_grad"])
def test_optimizer_flags_change_the_adam_steps(flags_a: dict, flags_b: dict) -> None:
    a, _ = _after_two_steps(flags_a)
    b, _ = _after_two_steps(flags_b)
    assert not torch.allclose(a, b, rtol=0, atol=1e-7)


def test_use_distributed_optimizer_is_forced_on_under_adam() -> None:
    """Suspect (reported): resolve() turns --use-distributed-optimizer on whenever --optimizer
    is adam, as miles does, and adam is the only optimizer check() accepts, so the flag's own
    value never reaches the engine. The seam below it does act: settings with it off build
    Megatron's unsharded optimizer (same steps on one rank)."""
    from ppodeck.engine.train.optimizer import build_optimizer, wrap_ddp
    from ppodeck.engine.train.platform import device_scope

    off = TrainSettings.from_args("actor", tiny_args(use_distributed_optimizer=False), 1, False)
    assert off.use_distributed_optimizer is True

    def kinds(use_distributed_optimizer: bool) -> list[str]:
        settings = replace(off, use_distributed_optimizer=use_distributed_optimizer)
        model, config = _build({})
        with device_scope():
            optimizer = build_optimizer(wrap_ddp(model, config, settings), settings)
        return [type(o).__name__ for o in optimizer.chained_optimizers]

    assert "DistributedOptimizer" in kinds(True)
    assert "DistributedOptimizer" not in kinds(False)


def test_accumulate_allreduce_grads_in_fp32_keeps_fp32_grads_of_bf16_params() -> None:
    from ppodeck.engine.train.optimizer import wrap_ddp
    from ppodeck.engine.train.platform import device_scope

    def grad_dtypes(fp32: bool) -> set[torch.dtype]:
        flags = {"accumulate_allreduce_grads_in_fp32": fp32}
        settings = replace(TrainSettings.from_args("actor", tiny_args(**flags), 1, cuda=False),
                           bf16=True)  # bf16 params: on the CPU only a test asks for them
        model, config = _build(flags, bf16=True)
        with device_scope():
            ddp = wrap_ddp(model, config, settings)
        return {p.main_grad.dtype for p in ddp.parameters()}

    assert grad_dtypes(False) == {torch.bfloat16} and grad_dtypes(True) == {torch.float32}


def test_min_lr_and_lr_decay_iters_set_where_the_decay_ends() -> None:
    from ppodeck.engine.train.optimizer import build_scheduler

    def final_lr(min_lr: float, lr_decay_iters: int | None = None) -> float:
        settings = TrainSettings.from_args("actor", tiny_args(
            lr=1e-3, min_lr=min_lr, lr_decay_style="linear", num_rollout=2,
            lr_decay_iters=lr_decay_iters), 1, cuda=False)
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
        scheduler = build_scheduler(optimizer, settings)
        for _ in range(settings.train_iters):
            scheduler.step(increment=settings.global_batch_size)
        return optimizer.param_groups[0]["lr"]

    assert final_lr(0.0) == pytest.approx(0.0) and final_lr(1e-4) == pytest.approx(1e-4)
    # train_iters steps run; decaying over twice as many stops half-way down
    assert final_lr(0.0, lr_decay_iters=8) == pytest.approx(5e-4)


# --------------------------------------------------------------------------------------------
# rollout: the manager on the synthetic task with the hf backend (engine/rollout/manager.py)
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("run")


def _manager(run_dir: Path, **flags: Any) -> Any:  # noqa: ANN401 - a RolloutManager
    """copy-digit, 64 prompts, 16 prompts x 4 samples a rollout, global batch 24."""
    from ppodeck.engine.rollout.manager import RolloutManager
    from tests.rollout.test_manager import tiny_args as manager_args

    manager = RolloutManager(manager_args(run_dir, **flags))
    manager.init()
    # the seeded initial model gives every token the same logit: spread them, so top-k and
    # the temperature have something to act on
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for param in manager.generator.model.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
    return manager


def test_rollout_shuffle_and_seed_order_the_prompts(run_dir: Path) -> None:
    def first_prompts(**flags: Any) -> list[int]:  # noqa: ANN401
        return [p.index for p in _manager(run_dir, **flags).source.prompts_at(0, 8)]

    in_order = first_prompts(rollout_shuffle=False)
    shuffled = first_prompts(rollout_shuffle=True, rollout_seed=42)
    assert in_order == list(range(8)) != shuffled
    assert first_prompts(rollout_shuffle=True, rollout_seed=7) != shuffled


def _groups_identical(batch: Any) -> list[bool]:  # noqa: ANN401
    """Per prompt (4 samples each): whether its 4 responses are the same tokens."""
    rows = [tuple(t) for t in batch.tokens]
    return [len(set(rows[i:i + 4])) == 1 for i in range(0, len(rows), 4)]


@pytest.mark.parametrize("flags", [
    {"rollout_top_k": 1}, {"rollout_top_p": 1e-3}, {"rollout_temperature": 1e-3},
], ids=["rollout_top_k", "rollout_top_p", "rollout_temperature"])
def test_sampling_flags_narrow_the_samples_of_a_prompt(run_dir: Path, flags: dict) -> None:
    """At the defaults (temperature 1, top-p 1, top-k -1) a random model's samples of a prompt
    differ; a top-k of 1, a tiny top-p or a near-zero temperature make them one greedy reply."""
    assert not all(_groups_identical(_manager(run_dir).generate(0)))
    assert all(_groups_identical(_manager(run_dir, **flags).generate(0)))


def test_rollout_seed_changes_the_sampled_responses(run_dir: Path) -> None:
    fixed = _manager(run_dir, rollout_shuffle=False, rollout_seed=1)
    again = _manager(run_dir, rollout_shuffle=False, rollout_seed=1)
    other = _manager(run_dir, rollout_shuffle=False, rollout_seed=2)
    assert fixed.generate(0).tokens == again.generate(0).tokens != other.generate(0).tokens


def test_disable_rollout_trim_samples_keeps_the_partial_global_batch(run_dir: Path) -> None:
    assert len(_manager(run_dir).generate(0)) == 48  # 64 samples trimmed to 2 x 24
    kept = _manager(run_dir, disable_rollout_trim_samples=True)
    assert len(kept.generate(0)) == 64 and kept.last_trimmed == 0


@pytest.mark.parametrize(("flags", "size"), [
    ({"rollout_batch_size": 8}, 24),  # 8 x 4 = 32 samples, trimmed to one global batch of 24
    ({"n_samples_per_prompt": 2}, 24),  # 16 x 2 = 32, trimmed to 24
    ({"global_batch_size": 16}, 64),  # 64 = 4 x 16: nothing trimmed
    ({"global_batch_size": None, "num_steps_per_rollout": 4}, 64),  # gbs 64 / 4 = 16
])
def test_batch_size_flags_set_the_rollout_size(run_dir: Path, flags: dict, size: int) -> None:
    assert len(_manager(run_dir).generate(0)) == 48  # 16 prompts x 4, trimmed to 2 x 24
    assert len(_manager(run_dir, **flags).generate(0)) == size


def test_rollout_max_response_len_caps_the_responses(run_dir: Path) -> None:
    def longest(limit: int) -> int:
        batch = _manager(run_dir, rollout_max_response_len=limit).generate(0)
        return max(batch.response_lengths)

    assert longest(2) == 2 < longest(6) <= 6


# --------------------------------------------------------------------------------------------
# evaluation (engine/rollout/evaluation.py): what is asked of the generator
# --------------------------------------------------------------------------------------------
def _eval_calls(**flags: Any) -> list[dict[str, Any]]:  # noqa: ANN401
    from ppodeck.engine.rollout.evaluation import EvalSet, evaluate_set
    from ppodeck.engine.rollout.types import GenOut, Prompt

    args = resolve_values({"rollout_batch_size": 2, "rollout_max_response_len": 8,
                           "rollout_temperature": 1.0, **flags}, os.environ)
    calls: list[dict[str, Any]] = []

    def generate(prompts: list[list[int]], n: int, **sampling: Any) -> list[GenOut]:  # noqa: ANN401
        calls.append({"prompts": len(prompts), "n": n, **sampling})
        return [GenOut(response_ids=[1], log_probs=[-1.0], truncated=False)
                for _ in range(len(prompts) * n)]

    prompts = [Prompt(index=i, text=str(i), token_ids=[i + 2]) for i in range(3)]
    evaluate_set(EvalSet("set", "set.jsonl", prompts), args, generate, lambda p, o: 1.0, 0)
    return calls


@pytest.mark.parametrize(("flag", "value", "key"), [
    ("n_samples_per_eval_prompt", 3, "n"),
    ("eval_temperature", 0.3, "temperature"),
    ("eval_top_p", 0.5, "top_p"),
    ("eval_top_k", 5, "top_k"),
    ("eval_max_response_len", 3, "max_new_tokens"),
    ("rollout_seed", 7, "seed"),
])
def test_eval_flags_change_what_evaluation_asks_the_generator(flag: str, value: Any,  # noqa: ANN401
                                                               key: str) -> None:
    default = _eval_calls()
    changed = _eval_calls(**{flag: value})
    assert [c[key] for c in changed] != [c[key] for c in default]
    if key != "seed":
        assert {c[key] for c in changed} == {value}


# --------------------------------------------------------------------------------------------
# prompt data (engine/rollout/data.py): which fields become the prompt, label and metadata
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:  # noqa: ANN401
    from ppodeck.engine.rollout.data import load_tokenizer
    from ppodeck.engine.rollout.synthetic import prepare_synthetic_task

    return load_tokenizer(prepare_synthetic_task("copy-digit", tmp_path_factory.mktemp("tok"), 4,
                                                 seed=0))


def _prompts(tmp_path: Path, tokenizer: Any, **flags: Any) -> list[Any]:  # noqa: ANN401
    import json

    from ppodeck.engine.rollout.data import PromptOptions, build_prompts, load_records

    rows = [{"input": "3 7 :", "answer": "3", "alt": "7", "metadata": {"rm_type": "a"},
             "info": {"rm_type": "b"}}]
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    options = PromptOptions.from_args(resolve_values(flags, os.environ))
    return build_prompts(load_records(path), tokenizer, options)[0]


def test_input_label_and_metadata_keys_pick_the_fields(tmp_path: Path, tokenizer: Any) -> None:  # noqa: ANN401
    (default,) = _prompts(tmp_path, tokenizer)
    (picked,) = _prompts(tmp_path, tokenizer, label_key="alt", metadata_key="info")
    assert (default.label, default.metadata) == (None, {"rm_type": "a"})
    assert (picked.label, picked.metadata) == ("7", {"rm_type": "b"})
    (answer,) = _prompts(tmp_path, tokenizer, label_key="answer", input_key="alt")
    assert (answer.label, answer.text, default.text) == ("3", "7", "3 7 :")


def test_apply_chat_template_kwargs_reach_the_template(tmp_path: Path, tokenizer: Any) -> None:  # noqa: ANN401
    tokenizer.chat_template = ("{% if terse %}T {% endif %}{% for m in messages %}"
                               "{{ m['content'] }} {% endfor %}")
    (plain,) = _prompts(tmp_path, tokenizer, apply_chat_template=True)
    (terse,) = _prompts(tmp_path, tokenizer, apply_chat_template=True,
                        apply_chat_template_kwargs='{"terse": true}')
    assert plain.text == "3 7 : " and terse.text == "T 3 7 : "


# --------------------------------------------------------------------------------------------
# tracking (engine/driver/tracking.py): what wandb and TensorBoard are started with
# --------------------------------------------------------------------------------------------
class FakeWandb:
    """The calls WandbBackend.start makes, recorded."""

    def __init__(self) -> None:
        self.inits: list[dict[str, Any]] = []
        self.logins: list[dict[str, Any]] = []

    def Settings(self, **kwargs: Any) -> dict[str, Any]:  # noqa: ANN401, N802
        return kwargs

    def login(self, **kwargs: Any) -> None:  # noqa: ANN401
        self.logins.append(kwargs)

    def init(self, **kwargs: Any) -> Any:  # noqa: ANN401
        self.inits.append(kwargs)
        return SimpleNamespace(define_metric=lambda *a, **k: None, dir=str(kwargs["dir"]),
                               id="run", url="http://wandb.invalid/run")


def _wandb_start(monkeypatch: pytest.MonkeyPatch, run_dir: Path,
                 **flags: Any) -> FakeWandb:  # noqa: ANN401
    from ppodeck.engine.driver.tracking import WandbBackend

    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    args = resolve_values({"use_wandb": True, "run_dir": str(run_dir),
                           "disable_wandb_random_suffix": True, **flags}, os.environ)
    WandbBackend.start(args, lambda *_: None)
    return fake


@pytest.mark.parametrize(("flag", "value", "where"), [
    ("wandb_project", "deck", lambda w: w.inits[0]["project"]),
    ("wandb_group", "grp", lambda w: w.inits[0]["group"]),
    ("wandb_team", "team", lambda w: w.inits[0]["entity"]),
    ("wandb_dir", "WDIR", lambda w: str(w.inits[0]["dir"])),
    ("wandb_run_id", "abc123", lambda w: w.inits[0].get("id")),
    ("wandb_host", "https://wandb.invalid", lambda w: w.inits[0]["settings"].get("base_url")),
    ("wandb_key", "k3y", lambda w: w.logins[0]["key"] if w.logins else None),
])
def test_wandb_flags_change_how_the_run_is_started(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path, flag: str, value: str,
                                                  where: Any) -> None:  # noqa: ANN401
    if flag == "wandb_dir":
        value = str(tmp_path / value)
    default = where(_wandb_start(monkeypatch, tmp_path / "run"))
    changed = where(_wandb_start(monkeypatch, tmp_path / "run", **{flag: value}))
    assert changed == value != default


def test_tb_project_and_experiment_name_the_event_file_directory(tmp_path: Path) -> None:
    from ppodeck.engine.driver.tracking import tensorboard_dir

    args = resolve_values({"run_dir": str(tmp_path / "run"), "use_tensorboard": True}, os.environ)
    named = {**args, "tb_project_name": "proj", "tb_experiment_name": "exp"}
    assert tensorboard_dir(named) == tmp_path / "run" / "tensorboard" / "proj" / "exp"
    assert tensorboard_dir(args).parent == tmp_path / "run" / "tensorboard" / "run"


def test_use_wandb_and_use_tensorboard_start_their_backends(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    from ppodeck.engine.driver import tracking

    monkeypatch.setitem(sys.modules, "wandb", FakeWandb())
    monkeypatch.delenv("TENSORBOARD_DIR", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)

    def names(**flags: Any) -> list[str]:  # noqa: ANN401
        args = resolve_values({"run_dir": str(tmp_path), "disable_wandb_random_suffix": True,
                               **flags}, os.environ)
        return [b.name for b in tracking.start_tracking(args, lambda *_: None).backends]

    assert names() == []
    assert names(use_wandb=True) == ["wandb"]
    assert names(use_tensorboard=True) == ["tensorboard"]


# --------------------------------------------------------------------------------------------
# --ci-test checks (engine/driver/ci_checks.py) and the SGLang engine arguments
# --------------------------------------------------------------------------------------------
def test_ci_disable_flags_turn_their_checks_off() -> None:
    from ppodeck.engine.driver.ci_checks import CIChecks, CIFailure

    bad_kl = {"step_metrics": [{"train/ppo_kl": 0.5, "train/pg_clipfrac": 0.0}]}
    bad_logprobs = {"rollout/log_probs": -1.0, "rollout/rollout_log_probs": -2.0}

    def fails(flags: dict[str, Any], actor: Any, metrics: dict) -> bool:  # noqa: ANN401
        checks = CIChecks(resolve_values({"ci_test": True, **flags}, os.environ), lambda *a: None)
        try:
            checks.after_rollout(1, None, actor, metrics, pushed=True)
        except CIFailure:
            return True
        return False

    assert fails({}, bad_kl, {})
    assert not fails({"ci_disable_kl_checker": True}, bad_kl, {})
    assert fails({}, None, bad_logprobs)
    assert not fails({"ci_disable_logprobs_checker": True}, None, bad_logprobs)


def test_sglang_max_running_requests_reaches_the_engine_arguments(tmp_path: Path) -> None:
    from ppodeck.engine.rollout.sglang_backend import engine_kwargs

    args = resolve_values({"rollout_batch_size": 4, "run_dir": str(tmp_path)}, os.environ)
    default = engine_kwargs(args, "model", random_weights=False)
    capped = engine_kwargs({**args, "sglang_max_running_requests": 16}, "model",
                           random_weights=False)
    assert "max_running_requests" not in default and capped["max_running_requests"] == 16


# --------------------------------------------------------------------------------------------
# micro-batching of the trainer's forward-only pass (TrainWorker._forward_only's plan)
# --------------------------------------------------------------------------------------------
def _worker_stub(**flags: Any) -> Any:  # noqa: ANN401
    """An actor rank's state for its host-side methods (one rank, no model)."""
    from types import MethodType

    from ppodeck.engine.train.actor_worker import ActorWorker
    from ppodeck.engine.train.context_parallel import CPLayout

    worker = SimpleNamespace(
        settings=TrainSettings.from_args("actor", tiny_args(**flags), 1, cuda=False),
        _cp=CPLayout(1, False), model=torch.nn.Module(), _dp_size=1,
        _is_last_stage=lambda: True, _critic_values=ActorWorker._critic_values)
    for name in ("_plan", "_advantages", "_sample_means", "_mean_over_dp", "_dp_group_or_none"):
        setattr(worker, name, MethodType(getattr(ActorWorker, name), worker))
    return worker


def _samples() -> list[Any]:
    from ppodeck.engine.train.batching import make_sample
    from tests.train.worker_harness import tiny_batch

    batch = tiny_batch()  # 8 samples of 7..16 tokens, rewards +-1
    return [make_sample(batch, p) for p in range(len(batch))]


@pytest.mark.parametrize(("flags_a", "flags_b"), [
    ({"gamma": 1.0}, {"gamma": 0.5}),
    ({"lambd": 1.0}, {"lambd": 0.5}),
    ({"normalize_advantages": False}, {"normalize_advantages": True}),
    ({"advantage_estimator": "ppo"}, {"advantage_estimator": "grpo", "n_samples_per_prompt": 2}),
], ids=["gamma", "lambd", "normalize_advantages", "advantage_estimator"])
def test_advantage_flags_change_the_advantages_trained_on(flags_a: dict, flags_b: dict) -> None:
    samples = _samples()
    values = {x.index: [0.1 * t for t in range(x.response_len)] for x in samples}
    old = [torch.zeros(x.response_len) for x in samples]

    def advantages(flags: dict) -> torch.Tensor:
        worker = _worker_stub(**{"normalize_advantages": False, **flags})
        trained, _, _ = worker._advantages(samples, values, old, None, None)
        return torch.cat(trained)

    assert not torch.allclose(advantages(flags_a), advantages(flags_b))


def _forward_only_micro_batches(**flags: Any) -> list[int]:  # noqa: ANN401
    """The sizes of the micro-batches the worker's log-prob pass runs over 8 samples."""
    from ppodeck.engine.train.base_worker import TrainWorker

    sizes: list[int] = []

    def run(micro_batches: list, _factory: Any, forward_only: bool) -> list[dict]:  # noqa: ANN401
        sizes.extend(mb.size for mb in micro_batches)
        return [{"log_probs": torch.zeros(mb.size, mb.targets.shape[1])} for mb in micro_batches]

    worker = _worker_stub(**flags)
    worker._run = run
    TrainWorker._forward_only(worker, _samples(), None, "log_probs")
    return sizes


def test_batching_flags_change_the_forward_only_micro_batches() -> None:
    assert _forward_only_micro_batches(micro_batch_size=2) == [2, 2, 2, 2]
    assert _forward_only_micro_batches(micro_batch_size=4) == [4, 4]
    budget = {"use_dynamic_batch_size": True, "max_tokens_per_gpu": 24}
    dynamic = _forward_only_micro_batches(**budget)
    assert dynamic != [2, 2, 2, 2] and sum(dynamic) == 8
    # --log-probs-max-tokens-per-gpu: its own budget for this pass (else --max-tokens-per-gpu)
    wider = _forward_only_micro_batches(**budget, log_probs_max_tokens_per_gpu=128)
    assert len(wider) < len(dynamic) and sum(wider) == 8
    assert _forward_only_micro_batches(use_dynamic_batch_size=True, max_tokens_per_gpu=128) \
        == wider


def test_offload_rollout_level_picks_what_the_engines_release() -> None:
    from tests.rollout.test_sglang_backend import FakeSGLang, generator

    def released(level: list[str]) -> Any:  # noqa: ANN401
        server = FakeSGLang()
        try:
            generator([server], offload_rollout_level=level).offload()
            return server.calls[0][2]["tags"]
        finally:
            server.close()

    assert released(["kv_cache", "weight"]) == ["cuda_graph", "kv_cache", "weights"]
    assert released(["kv_cache"]) == ["cuda_graph", "kv_cache"]


# --------------------------------------------------------------------------------------------
# the driver's loop with stand-in roles (engine/driver/ppo.py): who is offloaded when
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("flags", [
    {"offload_train": True}, {"offload": True}, {"colocate": True},
], ids=["offload_train", "offload", "colocate"])
def test_offload_flags_put_the_trainers_to_sleep_between_their_phases(
        tmp_path: Path, flags: dict) -> None:
    """Off (the default here): only the rollout is offloaded; --offload-train, --offload and
    --colocate (which defaults --offload-train on) also send the actor and critic to CPU."""
    from tests.engine.test_driver_run_loop import run_loop

    def offloaded(**run_flags: Any) -> set[str]:  # noqa: ANN401
        events = run_loop(tmp_path / str(len(run_flags)), **run_flags)
        return {e["model"] for e in events
                if e["kind"] == "offload" and e["direction"] == "offload"}

    assert offloaded() == {"rollout"}
    assert {"actor", "critic"} <= offloaded(**flags)


def test_num_rollout_is_how_many_rollouts_the_loop_runs(tmp_path: Path) -> None:
    from tests.engine.test_driver_run_loop import run_loop, starts

    assert starts(run_loop(tmp_path / "a", num_rollout=2), "generate") == [0, 1]
    assert starts(run_loop(tmp_path / "b", num_rollout=4), "generate") == [0, 1, 2, 3]


# --------------------------------------------------------------------------------------------
# checkpoints and initial weights (TrainWorker.save / _load_checkpoints / _init_weights)
# --------------------------------------------------------------------------------------------
def _checkpoint_worker(role: str, **flags: Any) -> Any:  # noqa: ANN401
    from types import MethodType

    from ppodeck.engine.train.worker import worker_class

    args = tiny_args(**flags)
    worker = SimpleNamespace(role=role, args=args, ddp="ddp", optimizer="opt", scheduler="sch",
                             settings=TrainSettings.from_args(role, args, 1, cuda=False),
                             _require_awake=lambda what: None, _bridge=None, _init_notes=[])
    for name in ("save", "_checkpoint_sources", "_load_checkpoints", "_load_from",
                 "_init_weights"):
        setattr(worker, name, MethodType(getattr(worker_class(role), name), worker))
    return worker


def test_save_and_critic_save_are_where_each_role_saves(monkeypatch: pytest.MonkeyPatch) -> None:
    from ppodeck.engine.train import checkpoint

    saved: list[tuple[str, str]] = []
    monkeypatch.setattr(checkpoint, "save_checkpoint",
                        lambda path, rollout_id, *rest, **kw: saved.append(path) or path)
    flags = {"save": "/ckpt/actor", "critic_save": "/ckpt/critic"}
    _checkpoint_worker("actor", **flags).save(3)
    _checkpoint_worker("critic", **flags).save(3)
    assert saved == ["/ckpt/actor", "/ckpt/critic"]
    _checkpoint_worker("critic", save="/ckpt/actor", critic_save=None).save(3)
    assert saved[-1] == "/ckpt/actor_critic"  # resolve()'s sibling of --save


def test_load_ref_load_and_critic_load_pick_what_init_loads(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """--load (a checkpoint with a tracker) resumes, else --ref-load starts the weights; the
    critic loads --critic-load through load_for_critic (a policy checkpoint's fresh value
    head)."""
    from ppodeck.engine.config.resolve import TRACKER
    from ppodeck.engine.train import checkpoint

    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(checkpoint, "has_checkpoint", lambda path: bool(path))
    monkeypatch.setattr(checkpoint, "load_checkpoint",
                        lambda path, *a, **k: calls.append(("actor", path)) or {})
    monkeypatch.setattr(checkpoint, "load_for_critic",
                        lambda path, *a, **k: calls.append(("critic", path)) or {})

    def loads(role: str, **flags: Any) -> tuple[str, str] | None:  # noqa: ANN401
        calls.clear()
        _checkpoint_worker(role, use_kl_loss=False, **flags)._load_checkpoints()
        return calls[-1] if calls else None

    run = tmp_path / "run"
    run.mkdir()
    (run / TRACKER).write_text("3")
    assert loads("actor") is None
    assert loads("actor", ref_load="/ref") == ("actor", "/ref")
    assert loads("actor", ref_load="/ref", load=str(run)) == ("actor", str(run))
    assert loads("critic", ref_load="/ref") == ("critic", "/ref")
    assert loads("critic", ref_load="/ref", critic_load="/critic") == ("critic", "/critic")


def test_hf_checkpoint_and_model_init_pick_the_initial_weights(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from ppodeck.engine.train import base_worker as worker_module

    def start(**flags: Any) -> str:  # noqa: ANN401
        picked: list[str] = []
        monkeypatch.setattr(worker_module.weights, "init_weights",
                            lambda *a, **k: picked.append("random"))
        w = _checkpoint_worker("actor", **flags)
        w._load_hf = lambda model, path: picked.append(path)
        w._tp_rank = 0
        w._init_weights(torch.nn.Linear(1, 1), None)
        return picked[0]

    assert start(model_init=None, hf_checkpoint="/hf/model") == "/hf/model"
    assert start(model_init="random", hf_checkpoint="/hf/model") == "random"
    assert start(model_init=None, hf_checkpoint=None) == "random"


def test_ref_update_interval_copies_the_actor_into_the_ref_every_nth_rollout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from types import MethodType

    from ppodeck.engine.train import actor_worker as worker_module

    def copied_after(interval: int | None) -> list[int]:
        rollouts: list[int] = []
        w = SimpleNamespace(settings=_settings(ref_update_interval=interval), model=None,
                            _ref_weights={}, _is_logging_rank=lambda: False)
        update = MethodType(worker_module.ActorWorker._maybe_update_ref, w)
        for rollout_id in range(6):
            monkeypatch.setattr(worker_module.weights, "backup",
                                lambda model, into, _r=rollout_id: rollouts.append(_r) or into)
            update(rollout_id)
        return rollouts

    assert copied_after(None) == []
    assert copied_after(2) == [1, 3, 5] and copied_after(3) == [2, 5]


@pytest.mark.parametrize(("flags", "saved_at"), [
    ({"save": "/ckpt"}, [4]),  # the last rollout only
    ({"save": "/ckpt", "save_interval": 2}, [1, 3, 4]),
    ({"save": None, "save_interval": 2}, []),
], ids=["save", "save_interval", "no_save"])
def test_save_and_save_interval_decide_when_the_loop_saves(tmp_path: Path, flags: dict,
                                                          saved_at: list[int]) -> None:
    from tests.engine.test_driver_run_loop import run_loop, starts

    assert starts(run_loop(tmp_path, **flags), "save") == saved_at


def test_num_critic_only_steps_holds_the_actor_back(tmp_path: Path) -> None:
    from tests.engine.test_driver_run_loop import run_loop, starts

    ppo = {"advantage_estimator": "ppo"}
    assert starts(run_loop(tmp_path / "a", **ppo), "actor_train") == [0, 1, 2, 3, 4]
    held = run_loop(tmp_path / "b", **ppo, num_critic_only_steps=2)
    assert starts(held, "actor_train") == [2, 3, 4]
    assert starts(held, "critic_train") == [0, 1, 2, 3, 4]


def test_ray_address_joins_that_cluster_instead_of_a_private_ray(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """roles.py hands --ray-address to start_ray as it is (this is the seam below Ray)."""
    from ppodeck.engine.driver import cluster

    inits: list[dict[str, Any]] = []
    monkeypatch.setattr(cluster.ray, "init", lambda **kwargs: inits.append(kwargs))
    monkeypatch.setattr(cluster, "loopback_only", lambda: None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for address in (None, "10.1.2.3:6379"):
        args = resolve_values({"ray_address": address}, os.environ)
        cluster.start_ray(args["ray_address"], 1)
    assert inits[0]["address"] == "local" and inits[1]["address"] == "10.1.2.3:6379"


def test_synthetic_task_and_num_prompts_make_the_prompt_set(run_dir: Path) -> None:
    """--synthetic-task writes its data set and scores by its own rule (the other built-in task,
    arithmetic, needs an HF tokenizer: tests/rollout/test_synthetic.py)."""
    copy = _manager(run_dir)
    fewer = _manager(run_dir, synthetic_num_prompts=32)
    assert (len(copy.source.prompts), len(fewer.source.prompts)) == (64, 32)
    # the task's rule scores it through --rm-type's default, so a --rm-type the user sets wins
    assert "rm_type" not in copy.source.prompts[0].metadata
    from ppodeck.engine.rollout.rewards import flag_rm_type

    assert flag_rm_type(copy.args) == "copy-digit"
    with pytest.raises(ValueError, match="arithmetic needs --hf-checkpoint"):
        _manager(run_dir, synthetic_task="arithmetic")
