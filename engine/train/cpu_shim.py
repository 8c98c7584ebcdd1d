"""Run megatron-core on a machine without CUDA (gloo, float32, local layer spec).

megatron-core assumes CUDA in a handful of places (RNG tracker, the global memory buffer,
device="cuda" in RoPE, DDP, the optimizer, the pipeline schedules and the backward of the
tensor/sequence-parallel regions). This shim patches
exactly those and nothing else. It is applied only when `torch.cuda.is_available()` is False:
with CUDA the stock code paths run.
"""

from __future__ import annotations

import contextlib
import functools
import operator
from collections.abc import Iterator

import torch

_APPLIED = False


def _is_cuda_device(device: object) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.startswith("cuda")
    # megatron passes bare ints (torch.cuda.current_device()) to mean cuda:<int>
    return isinstance(device, int) and not isinstance(device, bool)


class CudaToCpuMode(torch.overrides.TorchFunctionMode):
    """Rewrite cuda device arguments to cpu; `Tensor.cuda()` becomes a no-op.

    `Tensor.type()` reports the cuda type name because megatron's optimizer asserts on it.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            return func(*args).replace("torch.", "torch.cuda.", 1)
        if "device" in kwargs and _is_cuda_device(kwargs["device"]):
            kwargs["device"] = "cpu"
        if kwargs.get("pin_memory"):  # e.g. RoPE's CP slice index; pinning needs CUDA
            kwargs["pin_memory"] = False
        if func is torch.Tensor.to and len(args) > 1 and _is_cuda_device(args[1]):
            args = (args[0], "cpu", *args[2:])
        return func(*args, **kwargs)


def _patch_global_memory_buffer() -> None:
    import megatron.core.utils as mutils

    def get_tensor(self, tensor_shape, dtype, name, mem_alloc_context=None):  # noqa: ANN001
        numel = functools.reduce(operator.mul, tensor_shape, 1)
        buffer = self.buffer.get((name, dtype))
        if buffer is None or buffer.numel() < numel:
            buffer = torch.empty(numel, dtype=dtype, device="cpu", requires_grad=False)
            self.buffer[(name, dtype)] = buffer
        return buffer[:numel].view(*tensor_shape)

    mutils.GlobalMemoryBuffer.get_tensor = get_tensor


def _patch_torch_cuda_functions() -> None:
    # CudaToCpuMode turns the device index these return into "cpu"
    torch.cuda.current_device = lambda: 0  # type: ignore[assignment]
    torch.cuda.synchronize = lambda *a, **k: None  # type: ignore[assignment]
    torch.cuda.empty_cache = lambda *a, **k: None  # type: ignore[assignment]


def _in_cpu_mode(fn):  # noqa: ANN001, ANN202
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        with CudaToCpuMode():
            return fn(*args, **kwargs)
    return wrapped


def _patch_parallel_backwards() -> None:
    """Megatron's tensor/sequence-parallel autograd Functions allocate on
    `torch.cuda.current_device()` in their backward (sequence parallelism's gather and
    reduce-scatter). The autograd engine runs them with no torch-function mode active (the
    device mode is suspended while it handles `backward` itself), so they get the mode here."""
    import inspect

    from megatron.core.tensor_parallel import layers, mappings

    for module in (mappings, layers):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (issubclass(cls, torch.autograd.Function) and cls.__module__ == module.__name__
                    and "backward" in cls.__dict__):
                backward = cls.__dict__["backward"]
                fn = backward.__func__ if isinstance(backward, staticmethod) else backward
                cls.backward = staticmethod(_in_cpu_mode(fn))


def apply_cpu_shim() -> None:
    """Patch megatron/torch for CPU once per process. Refuses to run where CUDA exists."""
    global _APPLIED
    if _APPLIED:
        return
    if torch.cuda.is_available():
        raise RuntimeError("the CPU shim must not be applied on a machine with CUDA")
    _patch_global_memory_buffer()
    _patch_torch_cuda_functions()
    _patch_parallel_backwards()
    _APPLIED = True


@contextlib.contextmanager
def cpu_device_mode() -> Iterator[None]:
    """Scope in which megatron's hard-coded cuda tensors are created on the CPU."""
    with CudaToCpuMode():
        yield


def install_cpu_rng_tracker(seed: int) -> None:
    """CPU twin of `tensor_parallel.model_parallel_cuda_manual_seed(seed)`.

    Same seeds as megatron: data-parallel = seed, model-parallel = seed + 2718 + tp_rank.
    """
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import random as mrandom

    class CpuRNGStatesTracker(mrandom.CudaRNGStatesTracker):
        def add(self, name: str, seed: int) -> None:
            self._is_initialized = True
            if seed in self.seeds_:
                raise ValueError(f"seed {seed} already exists")
            self.seeds_.add(seed)
            if name in self.states_:
                raise ValueError(f"rng state {name} already exists")
            saved = torch.get_rng_state()
            torch.manual_seed(seed)
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(saved)

        @contextlib.contextmanager
        def fork(self, name: str = mrandom._MODEL_PARALLEL_RNG_TRACKER_NAME):  # noqa: ANN201
            if name not in self.states_:
                raise ValueError(f"rng state {name} is not added")
            saved = torch.get_rng_state()
            torch.set_rng_state(self.states_[name])
            try:
                yield
            finally:
                self.states_[name] = torch.get_rng_state()
                torch.set_rng_state(saved)

    tracker = CpuRNGStatesTracker()
    mrandom._CUDA_RNG_STATE_TRACKER = tracker
    mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
    torch.manual_seed(seed)
    tracker.add(mrandom._DATA_PARALLEL_RNG_TRACKER_NAME, seed)
    tracker.add(mrandom._MODEL_PARALLEL_RNG_TRACKER_NAME,
                seed + 2718 + ps.get_tensor_model_parallel_rank())
    tracker.add(mrandom._EXPERT_PARALLEL_RNG_TRACKER_NAME,
                seed + 1024 + 100 * ps.get_expert_model_parallel_rank()
                + ps.get_expert_tensor_parallel_rank())
