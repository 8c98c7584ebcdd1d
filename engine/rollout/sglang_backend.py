"""The `sglang` rollout backend: SGLang engines generate, the actor's HF weights are pushed in.

What ran against a real sglang 0.5.17 (one GPU, torch 2.11, the stripped wheel set of
bench/make_sglang_wheels.sh; tests/gpu/test_sglang_gpu.py, bench/gpu_bench.py --only sglang,
`ppodeck run qwen3-0.6b-ppo-1gpu --set rollout-backend=sglang`):
  - `sglang.Engine(**engine_kwargs(...))` inside a Ray actor colocated with the actor and
    critic (0.2 GPU), every keyword a ServerArgs field (tests/rollout keeps the field list);
    triton attention (the wheel set strips FA3, SGLang's Hopper default);
  - generate with log-probs; greedy tokens reproduce the reference model's up to bf16 ties;
  - the colocated weight push: CUDA IPC handles of one flattened bucket
    (weight_transfer.pack_cuda_ipc -> update_weights_from_tensor(load_format=
    "flattened_bucket")): 1.19 GB in 0.02 s;
  - release/resume of weights, KV cache and CUDA graphs (126 GiB freed, NVML), with miles'
    order on resume (weights, push, then KV cache and graphs), and flush_cache's result.
Not run: the HTTP client against a real server, TP > 1 engines, several engines, the NCCL
`DistributedWeightSync` against SGLang's receiving side, a full 6-rollout PPO run after the
resume-order fix (it ran two rollouts before it, and was cut by a timeout after it).
Sampling seeds: SGLang 0.5.17 uses a request's `sampling_seed` only with
--enable-deterministic-inference; without it sampling is not reproducible per seed (greedy
is). PPODECK_SGLANG_SAMPLING_SEED=0 leaves the field out.

Log-probs: SGLang returns log-probs of the sampling distribution after temperature (before
top-p/top-k renormalization) unless SGLANG_RETURN_ORIGINAL_LOGPROB is set; with top_p=1 and
top_k=-1 that is exactly what the hf backend returns (log-softmax(logits / T) of the chosen
token). Responses are cut after the first EOS with the hf backend's `cut_at_eos`, so both
backends hand the trainer the same shape of data.

Importing this module never imports sglang; only starting an engine does.
"""

from __future__ import annotations

import base64
import concurrent.futures as futures
import importlib.util
import io
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from ..model.weight_transfer import IpcWeights
from .types import GenOut

NamedTensors = list[tuple[str, torch.Tensor]]
# miles: actor 0.4 + critic 0.4 + one SGLang engine 0.2 of each colocated GPU
ENGINE_GPU_SHARE = 0.2
DEFAULT_BUCKET_BYTES = 512 << 20
ENGINE_START_TIMEOUT_S = 1800.0  # an engine placed and its model loaded (big models: minutes)
GROUP_NAME = "ppodeck_weight_sync"
# SGLang's memory-saver tags (sglang.srt.constants GPU_MEMORY_TYPE_*)
TAG_WEIGHTS, TAG_KV_CACHE, TAG_CUDA_GRAPH = "weights", "kv_cache", "cuda_graph"


class SGLangError(RuntimeError):
    """An SGLang call failed; the message names the endpoint and what the engine said."""


class SGLangUnavailable(ValueError):
    """--rollout-backend sglang asked for where it cannot run (no CUDA, or no sglang)."""


# --------------------------------------------------------------------------------------------
# backend choice (--rollout-backend auto)
# --------------------------------------------------------------------------------------------
def sglang_importable() -> bool:
    """Whether `import sglang` could work, without importing it (that takes seconds)."""
    return importlib.util.find_spec("sglang") is not None


def host_has_gpu() -> bool:
    """A CUDA GPU on this host, also from a process Ray gave no GPU share (the rollout manager
    of SGLang engines sees CUDA_VISIBLE_DEVICES=""): NVML ignores that variable."""
    if torch.cuda.is_available():
        return True
    from ..host.machine import nvml_devices

    return bool(nvml_devices())


def select_backend(requested: str, has_cuda: bool, sglang_importable: bool) -> tuple[str, str]:
    """(backend, note for the user) for --rollout-backend auto | hf | sglang."""
    if requested == "hf":
        return "hf", "rollout backend: hf (transformers generation), as requested"
    missing = [what for what, ok in (("no CUDA device", has_cuda),
                                     ("sglang is not installed", sglang_importable)) if not ok]
    if requested == "sglang":
        if missing:
            raise SGLangUnavailable(
                f"--rollout-backend sglang cannot run here: {' and '.join(missing)}; install "
                "the GPU extra (pip install 'ppodeck[gpu]') on a CUDA machine, or use "
                "--rollout-backend hf")
        return "sglang", "rollout backend: sglang, as requested"
    if requested != "auto":
        raise ValueError(f"unknown --rollout-backend {requested!r}; expected auto, hf or sglang")
    if missing:
        return "hf", (f"--rollout-backend auto picked hf (transformers generation): "
                      f"{' and '.join(missing)}")
    return "sglang", "--rollout-backend auto picked sglang: CUDA is present and sglang imports"


# --------------------------------------------------------------------------------------------
# requests and responses
# --------------------------------------------------------------------------------------------
def sampling_params(*, temperature: float, top_p: float, top_k: int, max_new_tokens: int,
                    eos_token_id: int | None, seed: int | None) -> dict[str, Any]:
    """SGLang sampling params meaning what the hf backend's GenerationConfig means.

    miles' top_k -1 = off is SGLang's convention too; temperature 0 is greedy in both.
    """
    params: dict[str, Any] = {
        "temperature": float(temperature),
        "top_p": float(top_p),
        "top_k": int(top_k) if top_k and top_k > 0 else -1,
        "max_new_tokens": int(max_new_tokens),
        # token ids in, token ids out: never let detokenization trim or rewrite anything
        "skip_special_tokens": False,
        "no_stop_trim": True,
    }
    if eos_token_id is not None:
        params["stop_token_ids"] = [int(eos_token_id)]
    if seed is not None and os.environ.get("PPODECK_SGLANG_SAMPLING_SEED", "1") != "0":
        params["sampling_seed"] = int(seed) % (2**31 - 1)
    return params


def row_seeds(seed: int, rows: int) -> list[int]:
    """One seed per request: the n samples of a prompt must not share a random stream."""
    return [(seed * 1_000_003 + i) % (2**31 - 1) for i in range(rows)]


def parse_generate_output(item: Mapping[str, Any]) -> tuple[list[int], list[float], str | None]:
    """(token ids, log-probs, finish reason) of one /generate result with return_logprob."""
    meta = item.get("meta_info") or {}
    pairs = meta.get("output_token_logprobs")
    if pairs is None:
        raise SGLangError("SGLang returned no output_token_logprobs (was return_logprob sent?)")
    # each entry is (logprob, token_id, token_text_or_None)
    log_probs = [float(p[0]) for p in pairs]
    tokens = [int(p[1]) for p in pairs]
    output_ids = item.get("output_ids")
    if output_ids is not None and list(map(int, output_ids)) != tokens:
        raise SGLangError(f"output_ids ({len(output_ids)}) and output_token_logprobs "
                          f"({len(tokens)}) disagree")
    finish = meta.get("finish_reason")
    reason = finish.get("type") if isinstance(finish, Mapping) else finish
    if reason == "abort":
        raise SGLangError(f"SGLang aborted a request: {finish}")
    return tokens, log_probs, reason


def to_gen_outs(results: Sequence[Mapping[str, Any]], eos_token_id: int | None,
                max_new_tokens: int) -> list[GenOut]:
    from .hf_backend import cut_at_eos

    parsed = [parse_generate_output(item) for item in results]
    return cut_at_eos([p[0] for p in parsed], [p[1] for p in parsed], eos_token_id,
                      [max_new_tokens] * len(parsed))


def memory_tags(offload_rollout_level: Iterable[str] | None) -> list[str]:
    """miles: cuda_graph always, plus kv_cache / weights when --offload-rollout-level says."""
    level = set(offload_rollout_level or (TAG_KV_CACHE, "weight"))
    tags = [TAG_CUDA_GRAPH]
    if TAG_KV_CACHE in level:
        tags.append(TAG_KV_CACHE)
    if "weight" in level or TAG_WEIGHTS in level:
        tags.append(TAG_WEIGHTS)
    return tags


def iter_buckets(named: Sequence[tuple[str, torch.Tensor]],
                 bucket_bytes: int) -> Iterator[NamedTensors]:
    """Consecutive groups of about `bucket_bytes` (a tensor larger than that goes alone)."""
    bucket: NamedTensors = []
    size = 0
    for name, tensor in named:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


def dtype_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> "bfloat16", the spelling SGLang's distributed update expects."""
    return str(dtype).removeprefix("torch.")


def serialize_named_tensors(named: NamedTensors) -> str:
    """SGLang's MultiprocessingSerializer.serialize(named, output_str=True) (base64 pickle).

    SGLang's own serializer is used when it imports (it patches CUDA-IPC reductions to carry
    device UUIDs); otherwise the same ForkingPickler + base64 it is built on.
    """
    try:
        from sglang.srt.utils import MultiprocessingSerializer
    except ImportError:
        from multiprocessing.reduction import ForkingPickler

        buf = io.BytesIO()
        ForkingPickler(buf).dump(named)
        return base64.b64encode(buf.getvalue()).decode("utf-8")
    return MultiprocessingSerializer.serialize(named, output_str=True)


# --------------------------------------------------------------------------------------------
# engines: an in-process sglang.Engine (usually inside a Ray actor) or an HTTP server
# --------------------------------------------------------------------------------------------
class EngineLike(Protocol):
    """What SGLangGenerator needs from one engine (blocking calls)."""

    def generate(self, input_ids: list[list[int]], sampling_params: list[dict[str, Any]],
                 return_logprob: bool = True) -> list[dict[str, Any]]: ...
    def update_weights_from_tensor(self, named_tensors: NamedTensors,
                                   load_format: str | None = None,
                                   flush_cache: bool = True) -> Any: ...  # noqa: ANN401
    def release_memory_occupation(self, tags: list[str] | None = None) -> Any: ...  # noqa: ANN401
    def resume_memory_occupation(self, tags: list[str] | None = None) -> Any: ...  # noqa: ANN401
    def flush_cache(self) -> Any: ...  # noqa: ANN401
    def shutdown(self) -> None: ...


def attention_backend() -> str:
    """SGLang's Hopper default (fa3) lives in sglang-kernel's FA3 library, which the carried
    wheel set strips (342 MB); triton needs no JIT. PPODECK_SGLANG_ATTENTION overrides
    (flashinfer is ~10% faster but JIT-compiles with nvcc for ~2 minutes on first use)."""
    return os.environ.get("PPODECK_SGLANG_ATTENTION", "triton")


def decode_batch_per_engine(args: Mapping[str, Any], num_engines: int) -> int:
    """The largest decode batch one engine sees in a rollout: CUDA graphs are captured up to
    it (SGLang's default list goes far beyond, and its capture dominates the start time)."""
    rows = int(args["rollout_batch_size"]) * int(args["n_samples_per_prompt"])
    return max(1, -(-rows // max(1, num_engines)))


def decode_graph_sizes(max_batch: int) -> list[int]:
    """The decode batch sizes to capture CUDA graphs for: the rollout's full batch and its
    halvings down to an eighth, and 1. SGLang pads a batch to the next captured size, so a
    shrinking batch (samples that finished) still replays a graph; its own list for 64 has 12
    sizes, and each capture adds to the engine's start."""
    sizes = {1} | {max_batch >> shift for shift in range(4) if max_batch >> shift >= 1}
    return sorted(sizes)


def engine_kwargs(args: Mapping[str, Any], model_path: str, *, random_weights: bool,
                  base_gpu_id: int | None = 0, rank: int = 0,
                  num_engines: int = 1) -> dict[str, Any]:
    """sglang.Engine(**kwargs) (= sglang 0.5.17 ServerArgs fields) for one rollout engine.

    Reads the resolved args as they are (seed 0 stays 0). base_gpu_id None: the engine actor
    asks Ray which GPU it got (multi-GPU engines).
    """
    kwargs: dict[str, Any] = {
        "model_path": model_path,
        "tp_size": int(args["rollout_num_gpus_per_engine"]),
        "base_gpu_id": base_gpu_id,
        "random_seed": int(args["seed"]) + rank,
        "dtype": "bfloat16" if args["bf16"] else "auto",
        # we send token ids and read token ids: no tokenizer process needed
        "skip_tokenizer_init": True,
        # release/resume_memory_occupation need it (torch_memory_saver)
        "enable_memory_saver": bool(args["offload_rollout"]),
        "attention_backend": attention_backend(),
        # flashinfer's sampling kernels JIT-compile on first use and refuse a sampling seed
        "sampling_backend": "pytorch",
        "cuda_graph_max_bs_decode": decode_batch_per_engine(args, num_engines),
        "cuda_graph_bs_decode": decode_graph_sizes(decode_batch_per_engine(args, num_engines)),
        # prefill runs once per rollout on short prompts; capturing its graphs took most of the
        # engine's start, for no measurable rollout gain (docs/performance.md)
        "disable_prefill_cuda_graph": True,
        # PPODECK_SGLANG_LOG_LEVEL=info shows where the engine start goes (driver.log)
        "log_level": os.environ.get("PPODECK_SGLANG_LOG_LEVEL", "error"),
    }
    if args["sglang_mem_fraction_static"] is not None:
        kwargs["mem_fraction_static"] = float(args["sglang_mem_fraction_static"])
    if args["sglang_max_running_requests"] is not None:
        kwargs["max_running_requests"] = int(args["sglang_max_running_requests"])
    if args.get("rollout_max_context_len"):
        kwargs["context_length"] = int(args["rollout_max_context_len"])
    if random_weights:
        kwargs["load_format"] = "dummy"  # weights arrive from the actor before any generate
    return kwargs


class SGLangEngineActor:
    """One `sglang.Engine` in this process; wrap with ray.remote at the call site.

    Methods mirror SGLangHTTPClient so SGLangGenerator drives either.
    """

    def __init__(self, engine_kwargs: Mapping[str, Any]) -> None:
        kwargs = dict(engine_kwargs)
        if kwargs.get("base_gpu_id") is None:
            kwargs["base_gpu_id"] = _ray_base_gpu_id()
        start = time.perf_counter()
        import sglang  # the only place sglang is imported

        imported = time.perf_counter()
        self.engine = sglang.Engine(**kwargs)
        self.start_info = {"import_seconds": imported - start,
                           "start_seconds": time.perf_counter() - imported,
                           "attention_backend": kwargs.get("attention_backend"),
                           "cuda_graph_max_bs_decode": kwargs.get("cuda_graph_max_bs_decode"),
                           "cuda_graph_bs_decode": kwargs.get("cuda_graph_bs_decode"),
                           "nvml_used_bytes": nvml_used_bytes()}

    def ready(self) -> dict[str, Any]:
        """How long the engine took to start, and NVML's used bytes just after."""
        return dict(self.start_info)

    def generate(self, input_ids: list[list[int]], sampling_params: list[dict[str, Any]],
                 return_logprob: bool = True) -> list[dict[str, Any]]:
        out = self.engine.generate(input_ids=input_ids, sampling_params=sampling_params,
                                   return_logprob=return_logprob)
        return out if isinstance(out, list) else [out]

    def update_weights_from_tensor(self, named_tensors: NamedTensors | list[str],
                                   load_format: str | None = None,
                                   flush_cache: bool = True) -> Any:  # noqa: ANN401
        """Named tensors, or with load_format "flattened_bucket" one serialized flattened
        bucket per TP rank (CUDA IPC handles: no weight bytes pass through this process)."""
        return _check_result("update_weights_from_tensor", self.engine.update_weights_from_tensor(
            named_tensors, load_format=load_format, flush_cache=flush_cache))

    def init_weights_update_group(self, master_address: str, master_port: int, rank_offset: int,
                                  world_size: int, group_name: str,
                                  backend: str = "nccl") -> Any:  # noqa: ANN401
        return _check_result("init_weights_update_group", self.engine.init_weights_update_group(
            master_address, master_port, rank_offset, world_size, group_name, backend))

    def update_weights_from_distributed(self, names: list[str], dtypes: list[str],
                                        shapes: list[list[int]], group_name: str,
                                        flush_cache: bool = True) -> Any:  # noqa: ANN401
        return _check_result("update_weights_from_distributed",
                             self.engine.update_weights_from_distributed(
                                 names, dtypes, shapes, group_name, flush_cache=flush_cache))

    def release_memory_occupation(self, tags: list[str] | None = None) -> dict[str, Any]:
        return self._measured(lambda: self.engine.release_memory_occupation(tags=tags))

    def resume_memory_occupation(self, tags: list[str] | None = None) -> dict[str, Any]:
        return self._measured(lambda: self.engine.resume_memory_occupation(tags=tags))

    def _measured(self, call: Callable[[], Any]) -> dict[str, Any]:
        """NVML's used bytes around the call: what SGLang really frees or takes back."""
        before = nvml_used_bytes()
        call()
        return {"nvml_before_bytes": before, "nvml_after_bytes": nvml_used_bytes()}

    def flush_cache(self) -> Any:  # noqa: ANN401
        return _check_result("flush_cache", self.engine.flush_cache())

    def shutdown(self) -> None:
        engine, self.engine = getattr(self, "engine", None), None
        if engine is not None:
            engine.shutdown()


class SGLangHTTPClient:
    """The documented SGLang HTTP API of one server (`python -m sglang.launch_server ...`)."""

    def __init__(self, base_url: str, timeout_s: float = 3600.0,
                 serializer: Callable[[NamedTensors], str] = serialize_named_tensors,
                 tp_size: int = 1) -> None:
        import requests

        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.serializer = serializer
        self.tp_size = tp_size
        self.session = requests.Session()

    # -- plumbing --
    def _request(self, method: str, endpoint: str, payload: Mapping[str, Any] | None = None,
                 timeout_s: float | None = None) -> Any:  # noqa: ANN401
        import requests

        url = f"{self.base_url}/{endpoint}"
        try:
            response = self.session.request(method, url, json=payload,
                                            timeout=timeout_s or self.timeout_s)
        except requests.RequestException as err:
            raise SGLangError(f"SGLang {endpoint} at {self.base_url}: {err}") from err
        if response.status_code != 200:
            raise SGLangError(f"SGLang {endpoint} answered HTTP {response.status_code}: "
                              f"{response.text[:500]}")
        if not response.content:
            return None  # release/resume answer 200 with an empty body
        try:
            body = response.json()
        except ValueError:
            return response.text  # /flush_cache answers plain text
        return _check_result(endpoint, body)

    # -- the API --
    def health(self) -> bool:
        try:
            self._request("GET", "health", timeout_s=5.0)
        except SGLangError:
            return False
        return True

    def generate(self, input_ids: list[list[int]], sampling_params: list[dict[str, Any]],
                 return_logprob: bool = True) -> list[dict[str, Any]]:
        out = self._request("POST", "generate", {"input_ids": input_ids,
                                                 "sampling_params": sampling_params,
                                                 "return_logprob": return_logprob})
        return out if isinstance(out, list) else [out]

    def update_weights_from_tensor(self, named_tensors: NamedTensors,
                                   load_format: str | None = None,
                                   flush_cache: bool = True) -> Any:  # noqa: ANN401
        # one payload per TP rank of the engine, as sglang.Engine does itself; a flattened
        # bucket arrives serialized already (CUDA IPC handles, one payload per rank)
        serialized = (list(named_tensors) if load_format == "flattened_bucket"
                      else [self.serializer(named_tensors) for _ in range(self.tp_size)])
        return self._request("POST", "update_weights_from_tensor", {
            "serialized_named_tensors": serialized, "load_format": load_format,
            "flush_cache": flush_cache})

    def init_weights_update_group(self, master_address: str, master_port: int, rank_offset: int,
                                  world_size: int, group_name: str,
                                  backend: str = "nccl") -> Any:  # noqa: ANN401
        return self._request("POST", "init_weights_update_group", {
            "master_address": master_address, "master_port": master_port,
            "rank_offset": rank_offset, "world_size": world_size, "group_name": group_name,
            "backend": backend})

    def update_weights_from_distributed(self, names: list[str], dtypes: list[str],
                                        shapes: list[list[int]], group_name: str,
                                        flush_cache: bool = True) -> Any:  # noqa: ANN401
        return self._request("POST", "update_weights_from_distributed", {
            "names": names, "dtypes": dtypes, "shapes": shapes, "group_name": group_name,
            "flush_cache": flush_cache})

    def release_memory_occupation(self, tags: list[str] | None = None) -> Any:  # noqa: ANN401
        return self._request("POST", "release_memory_occupation", {"tags": tags})

    def resume_memory_occupation(self, tags: list[str] | None = None) -> Any:  # noqa: ANN401
        return self._request("POST", "resume_memory_occupation", {"tags": tags})

    def flush_cache(self) -> Any:  # noqa: ANN401
        return self._request("POST", "flush_cache")

    def ready(self) -> dict[str, Any]:
        return {}  # the server's owner started it; nothing measured here

    def shutdown(self) -> None:
        self.session.close()  # the server's lifetime is its owner's business


def _check_result(what: str, result: Any) -> Any:  # noqa: ANN401
    """SGLang answers {"success": bool, "message": str}, a (success, message) tuple, or (the
    Engine's flush_cache) an object with `success` and `message` attributes."""
    success, message = None, ""
    if isinstance(result, Mapping) and "success" in result:
        success, message = result["success"], result.get("message", "")
    elif isinstance(result, tuple) and len(result) >= 2 and isinstance(result[0], bool):
        success, message = result[0], result[1]
    elif isinstance(getattr(result, "success", None), bool):
        success, message = result.success, getattr(result, "message", "")
    if success is False:
        raise SGLangError(f"SGLang {what} failed: {message}")
    return result


def nvml_used_bytes() -> int | None:
    """NVML's used bytes summed over every GPU of the host (NVML ignores CUDA_VISIBLE_DEVICES):
    while the engine releases or resumes, nothing else on them moves."""
    from ..host.machine import nvml_devices

    devices = nvml_devices()
    return None if devices is None else sum(d["used_bytes"] for d in devices)


def _ray_base_gpu_id() -> int:
    """The first GPU Ray gave this actor when it leaves CUDA_VISIBLE_DEVICES alone, else 0."""
    if os.environ.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES") != "1":
        return 0  # Ray made our GPU(s) visible as 0..n-1
    import ray

    ids = ray.get_gpu_ids()
    return int(ids[0]) if ids else 0


class RayEngine:
    """A Ray actor handle of SGLangEngineActor with blocking methods (EngineLike); every wait
    is bounded and a timeout names the engine (engine/host/workers.py CALL_TIMEOUT_S)."""

    def __init__(self, handle: Any, index: int = 0) -> None:  # noqa: ANN401
        self.handle, self.index = handle, index

    def __getattr__(self, method: str) -> Callable[..., Any]:
        remote = getattr(self.handle, method)
        return lambda *a, **k: self._get(method, remote.remote(*a, **k))

    def _get(self, method: str, ref: Any) -> Any:  # noqa: ANN401
        import ray

        from ..host.workers import CALL_TIMEOUT_S

        try:
            return ray.get(ref, timeout=CALL_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError as err:
            raise SGLangError(f"rollout engine {self.index}: {method} did not return within "
                              f"{CALL_TIMEOUT_S:.0f} s") from err


# --------------------------------------------------------------------------------------------
# the generator the RolloutManager drives (same interface as hf_backend.HFGenerator)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EngineLayout:
    """How many engines, their TP size, and where (miles' placement)."""

    num_engines: int
    tp_size: int
    colocate: bool
    first_bundle: int  # 0 when colocated, else after the actor's bundles

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> EngineLayout:
        tp = int(args.get("rollout_num_gpus_per_engine") or 1)
        actor_gpus = int(args.get("actor_num_nodes") or 1) * int(
            args.get("actor_num_gpus_per_node") or 1)
        colocate = bool(args.get("colocate"))
        gpus = int(actor_gpus if colocate else (args.get("rollout_num_gpus") or actor_gpus))
        if gpus < tp or gpus % tp:
            raise ValueError(f"{gpus} rollout GPUs do not split into engines of "
                             f"--rollout-num-gpus-per-engine {tp}")
        return cls(num_engines=gpus // tp, tp_size=tp, colocate=colocate,
                   first_bundle=0 if colocate else actor_gpus)

    def bundle(self, engine: int) -> int:
        return self.first_bundle + engine * self.tp_size

    def gpus_per_actor(self) -> float:
        """miles: an engine actor holds 0.2 of the bundle of its first GPU, colocated or not;
        a TP > 1 engine's other GPUs are the next tp - 1 bundles, used by its TP processes."""
        return ENGINE_GPU_SHARE

    def span(self, engine: int) -> range:
        """The slots (bundles in miles' (node IP, GPU id) order) whose GPUs the engine uses."""
        return range(self.bundle(engine), self.bundle(engine) + self.tp_size)


class SGLangGenerator:
    """Rollout generation on SGLang engines; `RolloutManager` calls it like HFGenerator."""

    def __init__(self, shape: Any, arch: str, args: Mapping[str, Any],  # noqa: ANN401
                 engines: Sequence[EngineLike] | None = None) -> None:
        self.shape, self.arch, self.args = shape, arch, dict(args)
        self.layout = EngineLayout.from_args(self.args)
        self.offload_tags = memory_tags(self.args.get("offload_rollout_level"))
        self.bucket_bytes = DEFAULT_BUCKET_BYTES  # host-tensor pushes only (not a miles flag)
        if engines is None:
            # fail here, naming the flag, rather than deep inside an engine start
            select_backend("sglang", host_has_gpu(), sglang_importable())
        self.engines: list[EngineLike] = (list(engines) if engines is not None
                                          else start_engines(shape, arch, self.args, self.layout))
        self._pool = futures.ThreadPoolExecutor(max_workers=max(1, len(self.engines)),
                                                thread_name_prefix="sglang")
        self._deferred: list[str] = []  # tags resumed after the next push (see onload)
        self.resumed_after_push: list[Any] = []
        self.start_info = self._each(lambda e: e.ready())
        self.notes = [start_note(i, info) for i, info in enumerate(self.start_info) if info]

    def _each(self, fn: Callable[[EngineLike], Any]) -> list[Any]:
        """Run `fn` on every engine at once; the first error wins."""
        return [f.result() for f in [self._pool.submit(fn, e) for e in self.engines]]

    # ---- generation ---------------------------------------------------------------------
    def generate(self, prompt_ids: Sequence[Sequence[int]], *, n_samples: int = 1,
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = -1,
                 max_new_tokens: int, eos_token_id: int | None, pad_token_id: int,
                 seed: int) -> list[GenOut]:
        """n_samples responses per prompt, prompt-major, as HFGenerator.generate."""
        del pad_token_id  # SGLang takes ragged rows: no padding
        rows = [list(map(int, p)) for p in prompt_ids for _ in range(n_samples)]
        if not rows:
            return []
        params = [sampling_params(temperature=temperature, top_p=top_p, top_k=top_k,
                                  max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                                  seed=s) for s in row_seeds(seed, len(rows))]
        shards = split_evenly(len(rows), len(self.engines))
        jobs = [self._pool.submit(engine.generate, rows[lo:hi], params[lo:hi], True)
                for engine, (lo, hi) in zip(self.engines, shards, strict=True) if hi > lo]
        results = [item for job in jobs for item in job.result()]
        if len(results) != len(rows):
            raise SGLangError(f"asked for {len(rows)} responses, SGLang returned {len(results)}")
        return to_gen_outs(results, eos_token_id, max_new_tokens)

    # ---- weights ------------------------------------------------------------------------
    def load_weights(self, hf_state_dict: Mapping[str, torch.Tensor] | IpcWeights) -> int:
        """Push HF-named tensors (engine/model/convert.py names) into every engine; CUDA IPC
        handles of the actor's flattened bucket (colocated) go to the engine as they are."""
        if isinstance(hf_state_dict, IpcWeights):
            payloads = [hf_state_dict.payload] * self.layout.tp_size
            self._each(lambda e: e.update_weights_from_tensor(payloads, "flattened_bucket", True))
            self._resume_deferred()
            return hf_state_dict.nbytes
        named = [(name, t.detach().contiguous()) for name, t in hf_state_dict.items()]
        buckets = list(iter_buckets(named, self.bucket_bytes))
        for i, bucket in enumerate(buckets):
            last = i == len(buckets) - 1  # flush the prefix cache once, after the last bucket
            self._each(lambda e, b=bucket, f=last: e.update_weights_from_tensor(b, None, f))
        self._resume_deferred()
        return sum(t.numel() * t.element_size() for _, t in named)

    # ---- memory -------------------------------------------------------------------------
    def offload(self) -> dict[str, Any]:
        """Release weights / KV cache / CUDA graphs before training (--offload-rollout)."""
        if not self.args["offload_rollout"]:
            return _noop_report("gpu")
        start = time.perf_counter()
        reports = self._each(lambda e: e.release_memory_occupation(self.offload_tags))
        return memory_report(reports, time.perf_counter() - start, self.offload_tags,
                             released=True)

    def onload(self) -> dict[str, Any]:
        """Resume what offload released, then flush the (now stale) prefix cache.

        miles' order when the weights were released too: only the weights come back here; the
        KV cache and CUDA graphs come back after the next push (load_weights), so the actor,
        which wakes up to export its weights, never meets a full KV cache on its GPU (it did:
        an out-of-memory error with SGLang's default --sglang-mem-fraction-static)."""
        if not self.args["offload_rollout"]:
            return _noop_report("gpu")
        start = time.perf_counter()
        now = [TAG_WEIGHTS] if TAG_WEIGHTS in self.offload_tags else list(self.offload_tags)
        self._deferred = [t for t in self.offload_tags if t not in now]
        reports = self._each(lambda e: e.resume_memory_occupation(now))
        if not self._deferred:
            self._each(lambda e: e.flush_cache())
        report = memory_report(reports, time.perf_counter() - start, now, released=False)
        report["deferred_tags"] = list(self._deferred)
        return report

    def _resume_deferred(self) -> None:
        """The KV cache and CUDA graphs, after the weights are in (see onload)."""
        tags, self._deferred = self._deferred, []
        if tags:
            self.resumed_after_push = self._each(lambda e: e.resume_memory_occupation(tags))
            self._each(lambda e: e.flush_cache())

    def shutdown(self) -> None:
        for engine in self.engines:
            try:
                engine.shutdown()
            except Exception:  # noqa: BLE001 - best effort: the process may be gone already
                pass
        self._pool.shutdown(wait=False)


def memory_report(reports: Sequence[Mapping[str, Any] | None], seconds: float,
                  tags: Sequence[str], *, released: bool) -> dict[str, Any]:
    """An `offload` report from what NVML saw around release/resume: bytes freed (released)
    or taken back (resumed). No bytes are copied (SGLang drops the memory; the weights come
    back by the push), so no copy rate is claimed. Without NVML the bytes are unknown (0)."""
    before = [r.get("nvml_before_bytes") for r in reports if r]
    after = [r.get("nvml_after_bytes") for r in reports if r]
    known = before and None not in before and None not in after
    delta = (sum(before) - sum(after)) if known else 0
    report: dict[str, Any] = {"noop": False, "bytes": max(0, delta if released else -delta),
                              "seconds": seconds, "gbps": None,
                              "where": "released" if released else "gpu", "tags": list(tags),
                              "copied": False, "measured_by": "nvml" if known else None}
    if known:
        report["nvml_after_bytes"] = sum(after)
    return report


def start_note(index: int, info: Mapping[str, Any]) -> str:
    used = info.get("nvml_used_bytes")
    return (f"sglang engine {index}: started in {info['start_seconds']:.1f} s (import "
            f"{info['import_seconds']:.1f} s; decode CUDA graphs for batches "
            f"{info.get('cuda_graph_bs_decode') or info['cuda_graph_max_bs_decode']}, "
            "no prefill graphs, "
            f"{info['attention_backend']} attention)"
            + ("" if used is None else f"; GPU memory used after start {used / 2**30:.1f} GiB"))


def _noop_report(where: str) -> dict[str, Any]:
    return {"noop": True, "bytes": 0, "seconds": 0.0, "gbps": None, "where": where}


def split_evenly(total: int, parts: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges covering range(total) in order, sizes differing by at most one."""
    base, extra = divmod(total, parts)
    bounds, lo = [], 0
    for i in range(parts):
        hi = lo + base + (1 if i < extra else 0)
        bounds.append((lo, hi))
        lo = hi
    return bounds


def start_engines(shape: Any, arch: str, args: Mapping[str, Any],  # noqa: ANN401
                  layout: EngineLayout) -> list[EngineLike]:
    """SGLang engines as Ray actors on the run's placement group (in-process without Ray)."""
    model_path, random_weights = model_dir(shape, arch, args)
    kwargs = [engine_kwargs(args, model_path, random_weights=random_weights, rank=i,
                            base_gpu_id=None if layout.tp_size > 1 else 0,
                            num_engines=layout.num_engines)
              for i in range(layout.num_engines)]
    placement = _current_placement_group()
    if placement is None:
        return [SGLangEngineActor(k) for k in kwargs]
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from ..host.workers import slots_from_env, wait_ready

    # bundles in miles' order (engine/driver/roles.py passes them); a TP > 1 engine sees every
    # GPU of its node and starts at its first bundle's GPU (base_gpu_id from Ray, see
    # _ray_base_gpu_id)
    slots = slots_from_env()
    env = {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"} if layout.tp_size > 1 else {}
    remote_cls = ray.remote(SGLangEngineActor)
    handles = []
    for i, k in enumerate(kwargs):
        check_engine_span(i, [slots[s] for s in layout.span(i)])
        strategy = PlacementGroupSchedulingStrategy(
            placement_group=placement, placement_group_bundle_index=slots[layout.bundle(i)][
                "bundle"])
        handles.append(remote_cls.options(
            num_cpus=ENGINE_GPU_SHARE, num_gpus=layout.gpus_per_actor(),
            scheduling_strategy=strategy, runtime_env={"env_vars": env},
            max_restarts=0).remote(k))
    wait_ready("rollout engine", handles, f"{ENGINE_GPU_SHARE} CPU and "
               f"{layout.gpus_per_actor()} GPU of its first bundle", ENGINE_START_TIMEOUT_S)
    return [RayEngine(h, i) for i, h in enumerate(handles)]


def check_engine_span(engine: int, span: Sequence[Mapping[str, Any]]) -> None:
    """A TP > 1 engine needs its GPUs on one node, numbered one after another."""
    nodes = {slot["node_id"] for slot in span}
    if len(nodes) > 1:
        raise SGLangError(f"rollout engine {engine} would span {len(nodes)} nodes (bundles "
                          f"{[s['bundle'] for s in span]}): give each node a multiple of "
                          "--rollout-num-gpus-per-engine GPUs")
    gpu_ids = [slot["gpu_id"] for slot in span]
    if None not in gpu_ids and gpu_ids != list(range(gpu_ids[0], gpu_ids[0] + len(span))):
        raise SGLangError(f"rollout engine {engine}: its GPUs {gpu_ids} are not consecutive; "
                          "SGLang takes base_gpu_id .. base_gpu_id + tp - 1")


def _current_placement_group() -> Any:  # noqa: ANN401
    if importlib.util.find_spec("ray") is None:
        return None
    import ray

    if not ray.is_initialized():
        return None
    from ray.util import get_current_placement_group

    return get_current_placement_group()


def model_dir(shape: Any, arch: str, args: Mapping[str, Any]) -> tuple[str, bool]:  # noqa: ANN401
    """(model_path for SGLang, whether its weights are dummies to be overwritten).

    With --hf-checkpoint, that directory. With --model-init random there are no weights on
    disk: a config-only directory is written and SGLang loads dummy weights; the actor's real
    weights are pushed before the first generate (the driver's initial update_weights).
    """
    if args.get("hf_checkpoint") and args.get("model_init") != "random":
        return str(args["hf_checkpoint"]), False
    from ..model.convert import save_hf_config

    root = Path(args.get("run_dir") or Path.cwd()) / "sglang_model"
    root.mkdir(parents=True, exist_ok=True)
    # Qwen2's q/k/v biases come with its architecture; Llama 3 rope scaling in rope_parameters
    # (and rope_scaling, for readers on transformers 4)
    save_hf_config(shape, arch, root)
    (root / "ppodeck.json").write_text(json.dumps({"note": "config only; weights pushed"}))
    return str(root), True


# --------------------------------------------------------------------------------------------
# trainer side of update_weights_from_distributed (engines on their own GPUs)
# --------------------------------------------------------------------------------------------
class DistributedWeightSync:
    """Rank 0 of an extra process group {trainer} + {every engine's TP ranks}; broadcasts.

    Usage on the trainer's rank 0 (miles' UpdateWeightFromDistributed):
        sync = DistributedWeightSync(engines, master_address, free_port, tp_size)
        sync.connect()                      # once
        sync.push(hf_named_tensors)         # after each actor update
    The engines join the group through init_weights_update_group (rank_offset 1 + i * tp) and
    receive each bucket through update_weights_from_distributed while we broadcast it.
    """

    def __init__(self, engines: Sequence[Any], master_address: str, master_port: int,  # noqa: ANN401
                 tp_size: int, *, backend: str = "nccl", group_name: str = GROUP_NAME,
                 device: str | torch.device | None = None,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> None:
        self.engines = list(engines)
        self.master_address, self.master_port = master_address, int(master_port)
        self.tp_size, self.backend, self.group_name = int(tp_size), backend, group_name
        self.device = torch.device(device or ("cuda" if backend == "nccl" else "cpu"))
        self.bucket_bytes = bucket_bytes
        self.world_size = 1 + len(self.engines) * self.tp_size
        self.group: Any = None
        self._pool = futures.ThreadPoolExecutor(max_workers=max(1, len(self.engines)))

    def connect(self, timeout_s: float = 600.0) -> None:
        jobs = [self._pool.submit(engine.init_weights_update_group, self.master_address,
                                  self.master_port, 1 + i * self.tp_size, self.world_size,
                                  self.group_name, self.backend)
                for i, engine in enumerate(self.engines)]
        self.group = init_custom_process_group(
            backend=self.backend, init_method=f"tcp://{self.master_address}:{self.master_port}",
            world_size=self.world_size, rank=0, group_name=self.group_name, timeout_s=timeout_s)
        for job in jobs:
            job.result()

    def push(self, named: Sequence[tuple[str, torch.Tensor]]) -> int:
        if self.group is None:
            raise RuntimeError("DistributedWeightSync.connect() first")
        buckets = list(iter_buckets(list(named), self.bucket_bytes))
        for i, bucket in enumerate(buckets):
            names = [n for n, _ in bucket]
            dtypes = [dtype_name(t.dtype) for _, t in bucket]
            shapes = [list(t.shape) for _, t in bucket]
            last = i == len(buckets) - 1
            # the engines post their receives, then our sends meet them
            jobs = [self._pool.submit(e.update_weights_from_distributed, names, dtypes, shapes,
                                      self.group_name, last) for e in self.engines]
            for _, tensor in bucket:
                self.group.broadcast(tensor.to(self.device).contiguous(), 0).wait()
            for job in jobs:
                job.result()
        return sum(t.numel() * t.element_size() for _, t in named)


def init_custom_process_group(*, backend: str, init_method: str, world_size: int, rank: int,
                              group_name: str, timeout_s: float = 600.0) -> Any:  # noqa: ANN401
    """A process group independent of the default one (the trainer's own world).

    torch.distributed has no public API for a second "world": like SGLang, verl and OpenRLHF,
    rendezvous by hand and build the group with the private helper. Note: if the default group
    was created with `device_id=` (eager NCCL init), torch would try to split it instead.
    """
    import inspect
    from datetime import timedelta

    from torch.distributed import distributed_c10d as c10d

    timeout = timedelta(seconds=timeout_s)
    store, rank, world_size = next(c10d.rendezvous(init_method, rank, world_size,
                                                   timeout=timeout))
    store.set_timeout(timeout)
    store = c10d.PrefixStore(group_name, store)
    params = inspect.signature(c10d._new_process_group_helper).parameters
    options = "backend_options" if "backend_options" in params else "pg_options"
    group, _ = c10d._new_process_group_helper(
        world_size, rank, [], c10d.Backend(backend), store, group_name=group_name,
        timeout=timeout, **{options: None})
    c10d._world.pg_group_ranks[group] = {i: i for i in range(world_size)}
    return group
