"""One place that knows whether we train on CUDA (nccl) or on the CPU (gloo + shim)."""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist

warnings.filterwarnings("ignore", message=".*Transformer Engine and Apex are not installed.*")


def has_cuda() -> bool:
    return torch.cuda.is_available()


# The fast-path switches (engine/train/fastpaths.py, fused.py, layer_compile.py read them):
# environment escape hatches, and the GPU bench's baselines.
FUSED_ENV = "PPODECK_FUSED"
LAYERS_ENV = "PPODECK_COMPILE_LAYERS"
# transformer-engine's layer spec is opt-in (PPODECK_TE=1): the local spec with SDPA and
# compiled layers trained faster (docs/performance.md), and the engine needs TE for nothing
# (its own attention splits sequences under context parallelism). The run log's layer-spec
# line says which spec ran and why.
TE_ENV = "PPODECK_TE"
TE_NOT_ASKED = (f"the local spec with compiled layers trains faster (0.45 vs 0.39 of the "
                f"matmul rate, docs/performance.md); {TE_ENV}=1 uses it")


def _switched_off(env: str) -> bool:
    return os.environ.get(env, "1").strip().lower() in ("0", "false", "no", "off")


def _switched_on(env: str) -> bool:
    return os.environ.get(env, "0").strip().lower() in ("1", "true", "yes", "on")


def fused_enabled() -> bool:
    """PPODECK_FUSED=0 turns every fast path off (an escape hatch, and the bench's baseline)."""
    return not _switched_off(FUSED_ENV)


def layer_compile_enabled() -> bool:
    """The switch alone (model.py adds: CUDA, no transformer-engine, compile works)."""
    return fused_enabled() and not _switched_off(LAYERS_ENV)


def has_transformer_engine() -> bool:
    """TE only counts with CUDA; a broken TE install raises anything, so catch everything."""
    return transformer_engine_status()[0]


# why TE was given up in this process after it imported (its layer spec failed to build); from
# then on every caller (layer spec, fusion, checkpoint layout) agrees on the local spec
_te_given_up: str | None = None


def give_up_transformer_engine(reason: str) -> None:
    global _te_given_up
    _te_given_up = reason


def transformer_engine_status() -> tuple[bool, str]:
    """(TE is used, why or why not): the reason goes into the run log's layer-spec line."""
    if not has_cuda():
        return False, "no CUDA"
    if not _switched_on(TE_ENV):
        return False, TE_NOT_ASKED if os.environ.get(TE_ENV) is None else f"{TE_ENV}=0"
    if _te_given_up is not None:
        return False, _te_given_up
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception as err:  # noqa: BLE001
        return False, f"transformer_engine.pytorch does not import ({type(err).__name__})"
    return True, f"transformer_engine.pytorch imports and {TE_ENV}=1"


@dataclass(frozen=True)
class Parallelism:
    tp: int = 1
    pp: int = 1
    cp: int = 1


def init_distributed(rank: int, world_size: int, master_addr: str, master_port: int,
                     parallel: Parallelism, seed: int) -> None:
    """Start this rank's process group and megatron's model-parallel state."""
    from megatron.core import parallel_state as ps

    os.environ["MASTER_ADDR"] = master_addr
    os.environ["MASTER_PORT"] = str(master_port)
    cuda = has_cuda()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    else:
        from .cpu_shim import apply_cpu_shim

        apply_cpu_shim()
        # two ranks on two cores: oversubscribed threads make gloo crawl
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world_size,
                            store=loopback_store(rank, world_size, master_addr, master_port))
    ps.initialize_model_parallel(
        tensor_model_parallel_size=parallel.tp,
        pipeline_model_parallel_size=parallel.pp,
        context_parallel_size=parallel.cp,
    )
    seed_model_parallel_rng(seed)


def loopback_store(rank: int, world_size: int, master_addr: str,
                   master_port: int) -> dist.TCPStore | None:
    """The rendezvous store, listening on 127.0.0.1 only when the world is local.

    Why: torch's TCPStore server (what env:// creates) listens on all interfaces (::) even
    with MASTER_ADDR=127.0.0.1; handing it a socket already bound to the loopback keeps the
    port off the network. A remote master_addr keeps torch's default (None: env://).
    """
    if master_addr not in ("127.0.0.1", "localhost"):
        return None
    import datetime
    import socket

    timeout = datetime.timedelta(minutes=5)
    if rank != 0:
        return dist.TCPStore("127.0.0.1", master_port, world_size, False, timeout=timeout)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", master_port))
    sock.listen()
    return dist.TCPStore("127.0.0.1", master_port, world_size, True, timeout=timeout,
                         master_listen_fd=sock.detach())  # the store owns the fd from here


def seed_model_parallel_rng(seed: int) -> None:
    if has_cuda():
        from megatron.core import tensor_parallel

        tensor_parallel.model_parallel_cuda_manual_seed(seed)
    else:
        from .cpu_shim import install_cpu_rng_tracker

        install_cpu_rng_tracker(seed)


def device_scope() -> contextlib.AbstractContextManager[None]:
    """Wrap every megatron call in this: on CPU it redirects megatron's cuda tensors."""
    if has_cuda():
        return contextlib.nullcontext()
    from .cpu_shim import cpu_device_mode

    return cpu_device_mode()


def device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if has_cuda() else torch.device("cpu")


def shutdown_distributed() -> None:
    from megatron.core import parallel_state as ps

    if ps.model_parallel_is_initialized():
        ps.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()
