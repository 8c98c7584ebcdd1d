"""The packed weight push: one byte buffer that round-trips every dtype and shape."""

from __future__ import annotations

import pickle

import numpy as np
import torch

from ppodeck.engine.model.weight_transfer import PackedWeights, as_state_dict, pack, unpack


def _state() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {
        "model.embed_tokens.weight": torch.randn(7, 5, generator=gen).to(torch.bfloat16),
        "model.norm.weight": torch.randn(5, generator=gen),
        "odd": torch.randn(3, 3, generator=gen).to(torch.float16).t(),  # not contiguous
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.zeros(0, 4),
        "ids": torch.arange(6, dtype=torch.int64).reshape(2, 3),
    }


def test_pack_round_trips_values_dtypes_and_shapes() -> None:
    state = _state()
    packed = pack(state)
    assert packed.buffer.dtype == np.uint8
    assert packed.nbytes == sum(t.numel() * t.element_size() for t in state.values())
    out = unpack(packed)
    assert list(out) == list(state)
    for name, tensor in state.items():
        assert out[name].dtype == tensor.dtype and out[name].shape == tensor.shape, name
        assert torch.equal(out[name], tensor), name


def test_packed_weights_survive_pickle_protocol_5_out_of_band() -> None:
    """What Ray does: the buffer goes out of band and comes back read-only."""
    packed = pack(_state())
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(packed, protocol=5, buffer_callback=buffers.append)
    assert buffers and len(data) < 2048  # the bytes did not go into the pickle stream
    readonly = [memoryview(bytes(b.raw())) for b in buffers]
    back = pickle.loads(data, buffers=readonly)
    assert isinstance(back, PackedWeights)
    for name, tensor in _state().items():
        assert torch.equal(as_state_dict(back)[name], tensor), name


def test_as_state_dict_passes_a_plain_dict_through() -> None:
    state = _state()
    assert as_state_dict(state).keys() == state.keys()
