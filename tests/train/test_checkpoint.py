"""torch_dist checkpoints: exact resume in a fresh process, Megatron layout, full disk, critic
loading a policy checkpoint, HF -> torch_dist conversion."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ppodeck.engine.driver.cluster import free_port
from ppodeck.engine.model.shape import ModelShape
from ppodeck.engine.train.checkpoint import (
    CRITIC_HEAD_NOTE,
    RELEASE,
    TRACKER,
    CheckpointDiskFullError,
    CheckpointError,
    convert_hf_to_torch_dist,
    load_checkpoint,
    load_for_critic,
    read_tracker,
    save_checkpoint,
)

REPO = Path(__file__).resolve().parents[2]
SHAPE = ModelShape(num_layers=2, hidden_size=32, ffn_hidden_size=64, num_attention_heads=4,
                   num_query_groups=2, kv_channels=8, vocab_size=64, max_sequence_length=32)
UNTIED = ModelShape(**{**SHAPE.__dict__, "untie_embeddings": True})


# ------------------------------------------------------------------------------------------
# helpers (also used by the fresh-process child below)
# ------------------------------------------------------------------------------------------
def build(role: str = "actor", shape: ModelShape = SHAPE, *, dist_opt: bool = True,
          seed: int = 0, bf16: bool = False):  # noqa: ANN201
    """DDP model + megatron optimizer + scheduler, as the train worker builds them."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    from ppodeck.engine.train.model import build_gpt, transformer_config
    from ppodeck.engine.train.platform import Parallelism, device, device_scope

    torch.manual_seed(seed)
    with device_scope():
        config = transformer_config(shape, Parallelism(), bf16=bf16)
        model = build_gpt(shape, role, config, seed=seed).to(device())  # as the worker does
        if bf16:  # what Megatron-LM's Float16Module does: torch-norm weights start in fp32
            model.to(torch.bfloat16)
        ddp = DistributedDataParallel(
            config=config, module=model,
            ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True,
                                                     use_distributed_optimizer=dist_opt))
        optimizer = get_megatron_optimizer(
            OptimizerConfig(optimizer="adam", lr=1e-2, min_lr=0.0, weight_decay=0.01,
                            bf16=bf16, params_dtype=torch.bfloat16 if bf16 else torch.float32,
                            use_distributed_optimizer=dist_opt), [ddp])
        scheduler = OptimizerParamScheduler(
            optimizer, init_lr=0.0, max_lr=1e-2, min_lr=0.0, lr_warmup_steps=2,
            lr_decay_steps=20, lr_decay_style="linear", start_wd=0.01, end_wd=0.01,
            wd_incr_steps=20, wd_incr_style="constant")
    return ddp, optimizer, scheduler


def train_step(ddp, optimizer, scheduler) -> None:  # noqa: ANN001
    """One optimizer step on random tokens (draws from the torch RNG, like dropout would)."""
    from ppodeck.engine.train.platform import device, device_scope

    ids = torch.randint(0, SHAPE.vocab_size, (2, 8)).to(device())
    with device_scope():
        ddp.zero_grad_buffer()
        optimizer.zero_grad()
        out = ddp(ids, torch.arange(8, device=device()).expand(2, 8), None)
        out.float().pow(2).mean().backward()
        optimizer.step()
        scheduler.step(1)


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    from megatron.core.utils import unwrap_model

    return {k: v.detach().cpu().clone() for k, v in unwrap_model(model).state_dict().items()
            if not k.endswith("_extra_state")}


def optimizer_state(optimizer) -> dict[str, torch.Tensor]:  # noqa: ANN001
    out = {}
    for i, inner in enumerate(getattr(optimizer, "chained_optimizers", [optimizer])):
        torch_opt = inner.optimizer
        for j, group in enumerate(torch_opt.param_groups):
            for k, param in enumerate(group["params"]):
                out[f"{i}.{j}.{k}.param"] = param.detach().cpu().clone()
                for name, value in torch_opt.state[param].items():
                    out[f"{i}.{j}.{k}.{name}"] = torch.as_tensor(value).detach().cpu().clone()
    return out


def after_resume(ddp, optimizer, scheduler) -> dict[str, object]:  # noqa: ANN001
    """What must be identical between the saving process and a resumed one."""
    state = {"weights": weights(ddp), "optim": optimizer_state(optimizer),
             "lr": optimizer.param_groups[0]["lr"], "sched": scheduler.state_dict()}
    from ppodeck.engine.train.platform import device

    # CPU draws, and CUDA draws on a GPU machine (on CPU both come from the CPU generator)
    state["draws"] = torch.cat([torch.rand(4), torch.rand(4, device=device()).cpu()])
    train_step(ddp, optimizer, scheduler)
    state["weights_after_step"] = weights(ddp)
    return state


def assert_same(got: dict, want: dict) -> None:
    assert got["lr"] == want["lr"] and got["sched"] == want["sched"]
    assert torch.equal(got["draws"], want["draws"]), "RNG not restored"
    for part in ("weights", "optim", "weights_after_step"):
        assert got[part].keys() == want[part].keys(), part
        for key, value in want[part].items():
            assert torch.equal(got[part][key], value), f"{part}: {key}"


def resume_child(ckpt_root: str, expect_path: str, port: int, bf16: bool = False) -> None:
    """Runs in a fresh interpreter: build differently seeded models, load, compare."""
    from ppodeck.engine.train.platform import Parallelism, init_distributed

    init_distributed(0, 1, "127.0.0.1", port, Parallelism(), seed=999)
    torch.manual_seed(4321)  # a different RNG position than the saver's
    expected = torch.load(expect_path, weights_only=False)
    for dist_opt in (True, False):
        ddp, optimizer, scheduler = build(dist_opt=dist_opt, seed=77, bf16=bf16)
        info = load_checkpoint(Path(ckpt_root) / f"dist{int(dist_opt)}", [ddp], optimizer,
                               scheduler)
        assert info["iteration"] == 3 and info["start_rollout_id"] == 4, info
        assert info["extra"] == {"rollout_id": 3, "data": {"epoch": 0, "offset": 24}}, info
        assert info["loaded_optim"] and info["loaded_rng"] and not info["release"], info
        assert_same(after_resume(ddp, optimizer, scheduler), expected[dist_opt])
    print("RESUME-OK")


# ------------------------------------------------------------------------------------------
# save + load
# ------------------------------------------------------------------------------------------
def check_resume_in_fresh_process(tmp_path: Path, *, bf16: bool = False) -> None:
    expected = {}
    for dist_opt in (True, False):
        ddp, optimizer, scheduler = build(dist_opt=dist_opt, seed=1, bf16=bf16)
        train_step(ddp, optimizer, scheduler)
        train_step(ddp, optimizer, scheduler)
        save_checkpoint(tmp_path / f"dist{int(dist_opt)}", 3, [ddp], optimizer, scheduler,
                        extra={"rollout_id": 3, "data": {"epoch": 0, "offset": 24}})
        expected[dist_opt] = after_resume(ddp, optimizer, scheduler)
    torch.save(expected, tmp_path / "expected.pt")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import test_checkpoint as t; "
            "t.resume_child(*sys.argv[2:4], int(sys.argv[4]), sys.argv[5] == '1')")
    proc = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent), str(tmp_path),
         str(tmp_path / "expected.pt"), str(free_port()), str(int(bf16))],
        cwd=REPO, env={**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))},
        capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0 and "RESUME-OK" in proc.stdout, proc.stderr[-3000:]


def test_resume_in_fresh_process_is_exact(megatron, tmp_path: Path) -> None:
    check_resume_in_fresh_process(tmp_path)


@pytest.mark.gpu
def test_resume_in_fresh_process_is_exact_bf16(megatron, tmp_path: Path) -> None:
    """The GPU path: bf16 params, fp32 main params, CUDA RNG (no CPU shim)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    check_resume_in_fresh_process(tmp_path, bf16=True)


def test_megatron_layout_and_tracker(megatron, tmp_path: Path) -> None:
    ddp, optimizer, scheduler = build(dist_opt=False)
    train_step(ddp, optimizer, scheduler)
    first = save_checkpoint(tmp_path, 7, [ddp], optimizer, scheduler, extra={"rollout_id": 7})
    second = save_checkpoint(tmp_path, 12, [ddp], optimizer, scheduler, extra={"rollout_id": 12})
    assert (first.name, second.name) == ("iter_0000007", "iter_0000012")
    assert (tmp_path / TRACKER).read_text() == "12"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_0000007", "iter_0000012", TRACKER]
    for name in ("metadata.json", "common.pt", ".metadata", "ppodeck.json"):
        assert (second / name).is_file(), name
    assert json.loads((second / "metadata.json").read_text())["sharded_backend"] == "torch_dist"
    assert json.loads((second / "ppodeck.json").read_text()) == {
        "iteration": 12, "extra": {"rollout_id": 12}}
    common = torch.load(second / "common.pt")  # weights_only: only plain types in common.pt
    assert common["iteration"] == 12 and common["checkpoint_version"] == 3.0
    with pytest.raises(TypeError, match="JSON"):
        save_checkpoint(tmp_path, 13, [ddp], optimizer, scheduler, extra={"x": object()})
    # an older iteration on request (Megatron's --ckpt-step)
    info = load_checkpoint(tmp_path, [ddp], optimizer, scheduler, iteration=7)
    assert info["iteration"] == 7 and info["path"].endswith("iter_0000007")


def test_loads_a_megatron_lm_release(megatron, tmp_path: Path) -> None:
    """miles' converter saves through Megatron-LM: its argparse `args` sit in common.pt."""
    import argparse

    from megatron.core import dist_checkpointing
    from megatron.core.transformer.enums import AttnBackend
    from megatron.core.utils import unwrap_model

    from ppodeck.engine.train.platform import device_scope

    ddp, _, _ = build(dist_opt=False, seed=2)
    (tmp_path / RELEASE).mkdir()
    with device_scope():
        dist_checkpointing.save({
            "args": argparse.Namespace(num_layers=2, attention_backend=AttnBackend.auto),
            "checkpoint_version": 3.0, "iteration": 1,
            "model": unwrap_model(ddp).sharded_state_dict()}, str(tmp_path / RELEASE))
    (tmp_path / TRACKER).write_text(RELEASE)
    fresh, fresh_opt, fresh_sched = build(dist_opt=True, seed=3)
    info = load_checkpoint(tmp_path, [fresh], fresh_opt, fresh_sched)
    assert info["release"] and info["start_rollout_id"] == 0 and info["extra"] == {}
    assert all(torch.equal(weights(fresh)[k], v) for k, v in weights(ddp).items())


def test_disk_full_mid_write_keeps_previous_checkpoint(megatron, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    ddp, optimizer, scheduler = build(dist_opt=True)
    train_step(ddp, optimizer, scheduler)
    save_checkpoint(tmp_path, 1, [ddp], optimizer, scheduler, extra={"rollout_id": 1})
    saved = weights(ddp)
    train_step(ddp, optimizer, scheduler)

    def disk_full(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise OSError(errno.ENOSPC, "No space left on device")

    # the shard writer runs in forked processes, which inherit this patch
    monkeypatch.setattr(filesystem_async, "_write_item", disk_full)
    with pytest.raises(CheckpointDiskFullError) as caught:
        save_checkpoint(tmp_path, 2, [ddp], optimizer, scheduler, extra={"rollout_id": 2})
    message = str(caught.value)
    assert "disk full" in message and str(tmp_path) in message and "GiB free" in message
    monkeypatch.undo()
    assert read_tracker(tmp_path) == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_0000001", TRACKER]
    fresh, fresh_opt, fresh_sched = build(dist_opt=True, seed=5)
    assert load_checkpoint(tmp_path, [fresh], fresh_opt, fresh_sched)["iteration"] == 1
    assert all(torch.equal(weights(fresh)[k], v) for k, v in saved.items())


def test_a_write_error_on_a_disk_left_full_is_a_disk_full_error(
        megatron, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's writer reports a full disk without errno ("PytorchStreamWriter failed writing
    file"), wrapped in torch's CheckpointException: when the disk has filled up meanwhile (the
    space check passed, less than the checkpoint is free after the failure), it is still
    named disk full; with space left, the error is the writer's own."""
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    from ppodeck.engine.train import checkpoint

    ddp, optimizer, scheduler = build(dist_opt=False)

    def write_fails(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise RuntimeError("[enforce fail at inline_container.cc] PytorchStreamWriter failed "
                           "writing file data/0: file write failed")

    monkeypatch.setattr(filesystem_async, "_write_item", write_fails)
    free = iter([10 ** 12, 1000])  # the check before writing, then after the failure
    monkeypatch.setattr(checkpoint, "_free_bytes", lambda path: next(free, 1000))
    with pytest.raises(CheckpointDiskFullError, match="disk full while writing"):
        save_checkpoint(tmp_path, 1, [ddp], optimizer, scheduler, extra={})
    monkeypatch.setattr(checkpoint, "_free_bytes", lambda path: 10 ** 12)
    with pytest.raises(BaseException) as caught:  # noqa: PT011 - the writer's own error
        save_checkpoint(tmp_path, 1, [ddp], optimizer, scheduler, extra={})
    assert not isinstance(caught.value, CheckpointDiskFullError)
    assert "PytorchStreamWriter" in str(caught.value)
    assert not list(tmp_path.glob("*.tmp-*"))


def test_disk_too_small_refuses_before_writing(megatron, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from ppodeck.engine.train import checkpoint

    ddp, optimizer, scheduler = build(dist_opt=False)
    monkeypatch.setattr(checkpoint, "_free_bytes", lambda path: 1000)
    with pytest.raises(CheckpointDiskFullError, match=r"needs about .* GiB"):
        save_checkpoint(tmp_path, 1, [ddp], optimizer, scheduler, extra={})
    assert list(tmp_path.iterdir()) == []


def test_shape_mismatch_names_the_flags(megatron, tmp_path: Path) -> None:
    ddp, optimizer, scheduler = build(dist_opt=False)
    save_checkpoint(tmp_path, 1, [ddp], optimizer, scheduler, extra={})
    wider = ModelShape(**{**SHAPE.__dict__, "ffn_hidden_size": 96})
    other, other_opt, other_sched = build(shape=wider, dist_opt=False)
    with pytest.raises(CheckpointError, match="--hidden-size"):
        load_checkpoint(tmp_path, [other], other_opt, other_sched)
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        load_checkpoint(tmp_path / "nothing", [other], other_opt, other_sched)


def _two_rank_worker(rank: int, port: int, root: str) -> None:
    from ppodeck.engine.train.platform import Parallelism, init_distributed, shutdown_distributed

    init_distributed(rank, 2, "127.0.0.1", port, Parallelism(), seed=5)
    ddp, optimizer, scheduler = build(dist_opt=True, seed=1)
    torch.manual_seed(100 + rank)  # DP ranks see different data: different RNG positions
    train_step(ddp, optimizer, scheduler)
    save_checkpoint(root, 1, [ddp], optimizer, scheduler, extra={"rollout_id": 1})
    expected = after_resume(ddp, optimizer, scheduler)
    ddp2, optimizer2, scheduler2 = build(dist_opt=True, seed=9)
    assert load_checkpoint(root, [ddp2], optimizer2, scheduler2)["iteration"] == 1
    assert_same(after_resume(ddp2, optimizer2, scheduler2), expected)
    shutdown_distributed()


@pytest.mark.slow
def test_two_data_parallel_ranks_save_one_checkpoint(tmp_path: Path) -> None:
    """DP=2 with the distributed optimizer: one shared temp dir, rank 0 publishes."""
    import torch.multiprocessing as mp

    mp.spawn(_two_rank_worker, args=(free_port(), str(tmp_path)), nprocs=2)
    assert read_tracker(tmp_path) == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_0000001", TRACKER]
    shards = sorted(p.name for p in (tmp_path / "iter_0000001").glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__0_1.distcp", "__1_0.distcp", "__1_1.distcp"]


# ------------------------------------------------------------------------------------------
# the critic
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [SHAPE, UNTIED], ids=["tied", "untied"])
def test_critic_loads_policy_checkpoint_with_fresh_value_head(megatron, tmp_path: Path,
                                                              shape: ModelShape) -> None:
    actor, actor_opt, actor_sched = build("actor", shape)
    train_step(actor, actor_opt, actor_sched)
    save_checkpoint(tmp_path, 4, [actor], actor_opt, actor_sched, extra={"rollout_id": 4})
    actor_weights = weights(actor)
    assert ("output_layer.weight" in actor_weights) == shape.untie_embeddings

    critic, critic_opt, critic_sched = build("critic", shape, seed=3)
    fresh_head = {k: v for k, v in weights(critic).items() if k.startswith("output_layer")}
    info = load_for_critic(tmp_path, [critic], critic_opt, critic_sched, finetune=True)
    assert info["notes"] == [CRITIC_HEAD_NOTE]
    assert not info["loaded_optim"] and info["start_rollout_id"] == 0
    got = weights(critic)
    for key, value in got.items():
        want = fresh_head[key] if key.startswith("output_layer") else actor_weights[key]
        assert torch.equal(value, want), key
    train_step(critic, critic_opt, critic_sched)  # the optimizer follows the loaded weights

    # the resume pitfall: a non-finetune load of the actor's dir is reported, not hidden
    critic2, critic2_opt, critic2_sched = build("critic", shape, seed=4)
    info = load_for_critic(tmp_path, [critic2], critic2_opt, critic2_sched)
    assert info["notes"][0] == CRITIC_HEAD_NOTE and "--critic-load" in info["notes"][1]
    assert info["start_rollout_id"] == 5 and not info["loaded_optim"]


def test_critic_resumes_its_own_checkpoint_and_actor_refuses_it(megatron,
                                                                tmp_path: Path) -> None:
    critic, critic_opt, critic_sched = build("critic", seed=3)
    train_step(critic, critic_opt, critic_sched)
    save_checkpoint(tmp_path, 2, [critic], critic_opt, critic_sched, extra={})
    saved = weights(critic)
    again, again_opt, again_sched = build("critic", seed=8)
    info = load_for_critic(tmp_path, [again], again_opt, again_sched)
    assert info["notes"] == [] and info["loaded_optim"] and info["start_rollout_id"] == 3
    assert all(torch.equal(weights(again)[k], v) for k, v in saved.items())
    actor, actor_opt, actor_sched = build("actor")
    with pytest.raises(CheckpointError, match="critic checkpoint"):
        load_checkpoint(tmp_path, [actor], actor_opt, actor_sched)


# ------------------------------------------------------------------------------------------
# HF -> torch_dist
# ------------------------------------------------------------------------------------------
def tiny_hf_dir(path: Path, *, tied: bool) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=32,
        rms_norm_eps=1e-5, tie_word_embeddings=tied))
    model.save_pretrained(path)
    return path


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_convert_hf_writes_release_and_skips_rerun(megatron, tmp_path: Path,
                                                   tied: bool) -> None:
    from ppodeck.engine.model.convert import (
        arch_for,
        hf_to_mcore,
        load_hf_checkpoint,
        shape_from_hf_config,
    )

    hf_dir = tiny_hf_dir(tmp_path / "hf", tied=tied)
    out = tmp_path / "torch_dist"
    messages: list[str] = []
    assert convert_hf_to_torch_dist(hf_dir, out, {"num_layers": 2}, log=messages.append) == out
    assert read_tracker(out) == RELEASE and (out / RELEASE / "metadata.json").is_file()
    assert sorted(p.name for p in out.iterdir()) == sorted([RELEASE, TRACKER])
    stamp = (out / RELEASE / "metadata.json").stat().st_mtime_ns
    messages.clear()
    convert_hf_to_torch_dist(hf_dir, out, log=messages.append)
    assert messages and "skipped" in messages[0]
    assert (out / RELEASE / "metadata.json").stat().st_mtime_ns == stamp

    hf_config, hf_state = load_hf_checkpoint(hf_dir)
    shape = shape_from_hf_config(hf_config)
    want = hf_to_mcore(hf_state, shape, arch_for(shape))
    actor, actor_opt, actor_sched = build("actor", shape)
    info = load_checkpoint(out, [actor], actor_opt, actor_sched)
    assert info["release"] and info["start_rollout_id"] == 0 and not info["loaded_optim"]
    got = weights(actor)
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], v) for k, v in want.items())
    critic, critic_opt, critic_sched = build("critic", shape)
    assert load_for_critic(out, [critic], critic_opt, critic_sched)["notes"] == [
        CRITIC_HEAD_NOTE]


def test_convert_checks_the_run_flags(megatron, tmp_path: Path) -> None:
    from ppodeck.engine.model.convert import ConversionError

    hf_dir = tiny_hf_dir(tmp_path / "hf", tied=True)
    with pytest.raises(ConversionError, match="--num-layers 36"):
        convert_hf_to_torch_dist(hf_dir, tmp_path / "out", {"num_layers": 36}, log=print)
    assert read_tracker(tmp_path / "out") is None
