"""The hf rollout's CUDA IPC weight sync between two real processes on one GPU (device only:
`python -m pytest tests/gpu/test_ipc_sync_gpu.py -m gpu`; bench/gpu_device_run.sh sync).

The parent plays the actor: its bf16 HF-named export lives on the GPU and is flattened into one
buffer whose IPC handle goes to a spawned "rollout" process, pickled as Ray pickles it. The
rollout copies it in place into its own model, and also loads the same export through the
packed host path into a second model: both must hold the actor's bits and decode the same
greedy tokens.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

import pytest
import torch

from ppodeck.engine.model.shape import ModelShape

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

SHAPE = ModelShape(num_layers=4, hidden_size=512, ffn_hidden_size=1536, num_attention_heads=8,
                   num_query_groups=4, kv_channels=64, vocab_size=4096, max_sequence_length=512,
                   rotary_base=1000000.0, norm_epsilon=1e-6, normalization="RMSNorm",
                   swiglu=True, qk_layernorm=True, add_bias_linear=False)
PROMPTS = [[5, 9, 200, 31], [7, 7, 1000], [3000, 12, 44, 45, 46, 47]]
NEW = 24


def actor_export(seed: int) -> dict[str, torch.Tensor]:
    """What the actor's export gives on its GPU: HF names, bf16, no tied lm_head."""
    from ppodeck.engine.rollout.hf_backend import HFGenerator

    gen = HFGenerator(SHAPE, "qwen3", device="cuda", dtype=torch.bfloat16, init_seed=seed)
    return {k: v.detach().clone() for k, v in gen.model.state_dict().items()
            if k != "lm_head.weight"}


def greedy(gen: Any) -> list[list[int]]:  # noqa: ANN401
    outs = gen.generate(PROMPTS, temperature=0.0, max_new_tokens=NEW, eos_token_id=None,
                        pad_token_id=0, seed=1)
    return [o.response_ids for o in outs]


def rollout_process(conn: Any) -> None:  # noqa: ANN401
    """The rollout side: per message (IPC handle, packed bytes), load each into its own model
    and answer with the IPC model's weights (host copies), both greedy outputs and timings."""
    from ppodeck.engine.model.ipc_sync import open_state
    from ppodeck.engine.model.weight_transfer import unpack
    from ppodeck.engine.rollout.hf_backend import HFGenerator

    synced = HFGenerator(SHAPE, "qwen3", device="cuda", dtype=torch.bfloat16, init_seed=99)
    packed_ref = HFGenerator(SHAPE, "qwen3", device="cuda", dtype=torch.bfloat16, init_seed=98)
    pointers = [p.data_ptr() for p in synced.model.parameters()]
    while (message := conn.recv()) is not None:
        handle, packed = message
        start = time.perf_counter()
        synced.load_weights(open_state(handle))
        torch.cuda.synchronize()
        ipc_seconds = time.perf_counter() - start
        start = time.perf_counter()
        packed_ref.load_weights(unpack(packed))
        torch.cuda.synchronize()
        packed_seconds = time.perf_counter() - start
        conn.send({"state": {k: v.cpu() for k, v in synced.model.state_dict().items()},
                   "in_place": pointers == [p.data_ptr() for p in synced.model.parameters()],
                   "ipc_tokens": greedy(synced), "packed_tokens": greedy(packed_ref),
                   "ipc_seconds": ipc_seconds, "packed_seconds": packed_seconds})


def test_ipc_sync_is_bit_exact_and_decodes_like_the_packed_path() -> None:
    from ppodeck.engine.model.ipc_sync import pack_torch_ipc
    from ppodeck.engine.model.weight_transfer import pack

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    rollout = ctx.Process(target=rollout_process, args=(child,), daemon=True)
    rollout.start()
    try:
        for seed in (1, 2):  # a second push replaces the first buffer, as every rollout does
            export = actor_export(seed)
            handle, buffer = pack_torch_ipc(export, torch.device("cuda", 0))
            parent.send((handle, pack(export)))
            got = parent.recv()
            del buffer  # the actor frees it at its next export
            assert got["in_place"], "the rollout's parameter storages were replaced"
            for name, tensor in export.items():
                sent, back = tensor.cpu().view(torch.int16), got["state"][name].view(torch.int16)
                assert torch.equal(back, sent), f"{name} differs after the IPC sync"
            assert got["ipc_tokens"] == got["packed_tokens"]
            print(f"seed {seed}: IPC load {got['ipc_seconds']:.4f} s, packed load "
                  f"{got['packed_seconds']:.4f} s, {handle.nbytes / 1e6:.1f} MB")
        parent.send(None)
        rollout.join(timeout=60)
        assert rollout.exitcode == 0
    finally:
        if rollout.is_alive():
            rollout.kill()
