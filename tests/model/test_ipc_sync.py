"""The hf rollout's CUDA IPC weight sync: the path decision, and everything up to the CUDA
call (flat buffer, handle payload, device remap, in-place load) with the IPC share faked."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from ppodeck.engine.model.ipc_sync import (
    CUDA_IPC,
    PACKED_HOST,
    TorchIpcWeights,
    flatten,
    local_device_index,
    open_state,
    pack_torch_ipc,
    sync_path_of,
    views,
    weight_sync_path,
)
from ppodeck.engine.model.shape import ModelShape
from ppodeck.engine.model.weight_transfer import IpcWeights, pack
from ppodeck.engine.rollout.hf_backend import HFGenerator

ONE_GPU = {"colocate": True, "actor_num_nodes": 1, "actor_num_gpus_per_node": 1,
           "rollout_backend": "hf"}


@pytest.mark.parametrize(("changes", "cuda", "sglang", "env", "expected", "why"), [
    ({}, True, False, {}, CUDA_IPC, "hf rollout"),
    ({"rollout_backend": "sglang"}, True, True, {}, CUDA_IPC, "SGLang"),
    ({"rollout_backend": "sglang"}, True, False, {}, PACKED_HOST, "'sglang'"),
    ({}, False, False, {}, PACKED_HOST, "no CUDA"),
    ({"colocate": False}, True, False, {}, PACKED_HOST, "own GPUs"),
    ({"actor_num_gpus_per_node": 2}, True, False, {}, PACKED_HOST, "2 GPUs"),
    ({"actor_num_nodes": 2}, True, False, {}, PACKED_HOST, "2 GPUs"),
    ({}, True, False, {"PPODECK_WEIGHT_SYNC": "packed"}, PACKED_HOST, "forces"),
    ({}, True, False, {"PPODECK_WEIGHT_SYNC": ""}, CUDA_IPC, "hf rollout"),
])
def test_sync_path_follows_config_and_machine(changes: dict, cuda: bool, sglang: bool,
                                               env: dict, expected: str, why: str) -> None:
    path = weight_sync_path({**ONE_GPU, **changes}, cuda, sglang, env)
    assert path.name == expected and why in path.reason


SHAPE = ModelShape(num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4,
                   num_query_groups=2, kv_channels=16, vocab_size=32, max_sequence_length=64,
                   norm_epsilon=1e-6, qk_layernorm=True)

_SHARED: dict[str, torch.Tensor] = {}  # what the fake "IPC" maps: this process's buffers
_OPENED_ON: list[Any] = []


def _fake_rebuild(key: str, *args: Any) -> torch.Tensor:  # noqa: ANN401
    _OPENED_ON.append(args[5])  # rebuild_cuda_tensor's storage_device (after tensor_cls...)
    return _SHARED[key]


def _fake_share(flat: torch.Tensor) -> tuple[Any, tuple[Any, ...]]:
    """reduce_tensor's shape: (rebuild, 15 args with the device index 7th)."""
    key = f"buf{len(_SHARED)}"
    _SHARED[key] = flat
    return _fake_rebuild, (key, None, None, None, None, None, 0, *[None] * 8)


def _actor_export(seed: int) -> dict[str, torch.Tensor]:
    """An HF-named bf16 state dict as the actor's export gives it (tied: no lm_head)."""
    source = HFGenerator(SHAPE, "qwen3", dtype=torch.bfloat16, init_seed=seed)
    return {k: v.clone() for k, v in source.model.state_dict().items() if k != "lm_head.weight"}


def test_handle_is_small_and_remaps_the_device_by_uuid() -> None:
    state = _actor_export(1)
    handle, flat = pack_torch_ipc(state, torch.device("cpu"), share=_fake_share,
                                  uuid=lambda _: "GPU-actor", synchronize=lambda _: None)
    assert handle.nbytes == flat.numel() >= sum(t.nbytes for t in state.values())
    assert handle.device_uuid == "GPU-actor" and [s.name for s in handle.slots] == list(state)
    # what Ray sends: the handle, not the tensors (a few kB for ~30 tensors)
    assert len(pickle.dumps(handle)) < 8_000 < flat.numel()
    received = pickle.loads(pickle.dumps(handle))
    opened = open_state(received, local_uuids=lambda: ["GPU-other", "GPU-actor"])
    assert _OPENED_ON[-1] == 1  # the rollout's own index of the actor's GPU
    for name, tensor in state.items():
        assert opened[name].dtype == tensor.dtype and torch.equal(opened[name], tensor), name


def test_synced_weights_land_in_place_bit_for_bit() -> None:
    """The rollout's parameters keep their storages (the offloader and the decoder's graphs
    hold them) and equal the actor's export exactly, in bf16."""
    target = HFGenerator(SHAPE, "qwen3", dtype=torch.bfloat16, init_seed=7)
    pointers = {k: p.data_ptr() for k, p in target.model.named_parameters()}
    state = _actor_export(2)
    handle, _flat = pack_torch_ipc(state, torch.device("cpu"), share=_fake_share,
                                   uuid=lambda _: "GPU-0", synchronize=lambda _: None)
    loaded = target.load_weights(open_state(handle, local_uuids=lambda: ["GPU-0"]))
    assert loaded == sum(t.nbytes for t in state.values())
    params = dict(target.model.named_parameters())
    assert {k: p.data_ptr() for k, p in params.items()} == pointers
    for name, tensor in state.items():
        assert torch.equal(params[name].view(torch.int16), tensor.view(torch.int16)), name
    assert target.model.lm_head.weight.data_ptr() == params["model.embed_tokens.weight"].data_ptr()


def test_flat_buffer_views_round_trip_odd_layouts() -> None:
    state = {"t": torch.arange(6.0).reshape(2, 3).t(), "h": torch.ones(3, dtype=torch.float16),
             "empty": torch.zeros(0, 2), "i": torch.tensor([5, -1])}
    flat, slots = flatten(state, torch.device("cpu"))
    assert all(s.offset % 64 == 0 for s in slots)
    out = views(flat, slots)
    assert all(torch.equal(out[k], v) and out[k].dtype == v.dtype for k, v in state.items())


def test_unknown_gpu_names_the_fix() -> None:
    with pytest.raises(RuntimeError, match="PPODECK_WEIGHT_SYNC=packed"):
        local_device_index("GPU-a", ["GPU-b"])


def test_each_payload_names_its_path() -> None:
    handle = TorchIpcWeights(_fake_rebuild, (), "GPU-0", (), 0, 0.0)
    assert sync_path_of(handle) == CUDA_IPC
    assert sync_path_of(IpcWeights(payload="", nbytes=0, count=0, flatten_seconds=0.0)) == CUDA_IPC
    assert sync_path_of(pack({"a": torch.zeros(2)})) == PACKED_HOST
    assert sync_path_of({"a": torch.zeros(2)}) == PACKED_HOST


def test_rollout_manager_loads_ipc_handles_and_reports_the_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rollout actor's update_weights end to end, short of the CUDA mapping: the event
    names cuda_ipc for handles and packed_host for the packed buffer."""
    from ppodeck.engine.rollout.manager import RolloutManager
    from tests.rollout.test_manager import tiny_args

    mgr = RolloutManager(tiny_args(tmp_path, rollout_batch_size=4, global_batch_size=16))
    mgr.init()
    model = mgr.generator.model
    state = {k: torch.randn_like(v) for k, v in model.state_dict().items()
             if k != "lm_head.weight"}
    handle, _flat = pack_torch_ipc(state, torch.device("cpu"), share=_fake_share,
                                   uuid=lambda _: "GPU-0", synchronize=lambda _: None)
    monkeypatch.setattr("ppodeck.engine.model.ipc_sync.visible_uuids", lambda: ["GPU-0"])
    report = mgr.update_weights(handle)
    assert report["path"] == CUDA_IPC and report["bytes"] == sum(t.nbytes for t in state.values())
    assert torch.equal(model.model.embed_tokens.weight, state["model.embed_tokens.weight"])
    assert mgr.update_weights(pack(state))["path"] == PACKED_HOST
    mgr.shutdown()
