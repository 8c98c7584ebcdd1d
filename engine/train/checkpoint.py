"""Megatron torch_dist checkpoints for the actor and the critic; HF -> torch_dist conversion.

Layout (Megatron's, so miles and Megatron-LM tools recognise it):

    <dir>/latest_checkpointed_iteration.txt   "<iteration>" or "release"
    <dir>/iter_0000007/                        dist_checkpointing, torch_dist format
    <dir>/release/                             converted HF weights: model only, iteration 0

The state dict uses Megatron-LM's top-level keys (`checkpoint_version`, `iteration`, `model`
(`model0`, `model1`... for virtual pipeline chunks), `optimizer`, `opt_param_scheduler`,
`rng_state`) plus `ppodeck_extra` (a JSON string: rollout id, data position ...). Each
iteration directory also holds `ppodeck.json` (iteration + extra) so light tools can read
it without torch.

Crash safety: a save writes `iter_XXXXXXX.tmp-<pid>/`, renames it once every rank finished,
then replaces the tracker atomically. A crash or a full disk never touches the previous
checkpoint or the tracker.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import json
import os
import random
import shutil
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ..config.resolve import TRACKER
from ..run.save_manifest import write_manifest
from .platform import device_scope, has_cuda

RELEASE = "release"
CHECKPOINT_VERSION = 3.0
EXTRA_FILE = "ppodeck.json"
CRITIC_HEAD_NOTE = "critic value head freshly initialized: the checkpoint has no value head"
HEAD_KEYS = ("output_layer.weight", "output_layer.bias")

# Megatron-LM's defaults for torch_dist (training/checkpointing.py): the distributed optimizer
# saves its buffers "dp_reshardable"; the default "fully_sharded_model_space" is rejected by
# dist_checkpointing 0.16 ("flattened_range is not supported").
SHARDING_METADATA: dict[str, Any] = {
    "distrib_optim_sharding_type": "dp_reshardable",
    "singleton_local_shards": False,
    "chained_optim_avoid_prefix": True,
}
_FREE_SPACE_MARGIN = 1.02  # metadata and pickling overhead on top of the raw tensor bytes
_TMP_MARK = ".tmp-"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be written or read; the message names the directory."""


class CheckpointDiskFullError(CheckpointError):
    """The disk filled up (or would) while saving; earlier checkpoints are intact."""


# --------------------------------------------------------------------------------------------
# layout: tracker and directory names (stdlib only)
# --------------------------------------------------------------------------------------------
def iteration_dir_name(iteration: int) -> str:
    return f"iter_{iteration:07d}"


def read_tracker(ckpt_dir: str | os.PathLike[str]) -> str | None:
    """The tracker's content ("release" or an iteration number), None when there is none."""
    path = Path(ckpt_dir) / TRACKER
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return text or None


def has_checkpoint(ckpt_dir: str | os.PathLike[str] | None) -> bool:
    return bool(ckpt_dir) and read_tracker(ckpt_dir) is not None  # type: ignore[arg-type]


def checkpoint_path(ckpt_dir: str | os.PathLike[str], iteration: int | None = None) -> Path:
    """The directory to load: `iteration` if given (Megatron's --ckpt-step), else the tracker's."""
    root = Path(ckpt_dir)
    if iteration is not None:
        return root / iteration_dir_name(iteration)
    tag = read_tracker(root)
    if tag is None:
        raise CheckpointError(f"{root} holds no checkpoint: {TRACKER} is missing")
    if tag == RELEASE:
        return root / RELEASE
    try:
        return root / iteration_dir_name(int(tag))
    except ValueError:
        raise CheckpointError(f"{root / TRACKER} says {tag!r}: expected an iteration number "
                              f"or {RELEASE!r}") from None


def write_tracker(ckpt_dir: str | os.PathLike[str], tag: str) -> None:
    """Replace the tracker atomically: readers see the old or the new content, never half."""
    root = Path(ckpt_dir)
    tmp = root / f"{TRACKER}{_TMP_MARK}{os.getpid()}"
    try:
        with open(tmp, "w") as handle:
            handle.write(tag)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, root / TRACKER)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            raise _disk_full(root, root / TRACKER, "updating the tracker") from exc
        raise


# --------------------------------------------------------------------------------------------
# save
# --------------------------------------------------------------------------------------------
def save_checkpoint(save_dir: str | os.PathLike[str], iteration: int, model_chunks: Sequence[Any],
                    optimizer: Any, scheduler: Any, *,  # noqa: ANN401
                    extra: Mapping[str, Any]) -> Path:
    """Save model, optimizer, scheduler, RNG and `extra` to `save_dir/iter_XXXXXXX/`.

    Every rank of the model's world calls this (collective). `extra` must be JSON-able.
    Returns the final directory. Raises CheckpointDiskFullError when the disk is (or gets)
    full; the previous checkpoint and the tracker are left as they were.
    """
    extra_json = _encode_extra(extra)
    with device_scope():
        state = _state_for_save(iteration, model_chunks, optimizer, scheduler, extra_json)
    final = Path(save_dir) / iteration_dir_name(iteration)
    _save_state(state, final, tracker_tag=str(iteration),
                summary={"iteration": iteration, "extra": json.loads(extra_json)})
    return final


def _encode_extra(extra: Mapping[str, Any]) -> str:
    # JSON, not pickle: common.pt is read back with torch.load(weights_only=True)
    try:
        return json.dumps(dict(extra), sort_keys=True)
    except TypeError as exc:
        raise TypeError(f"checkpoint extra must be JSON-serializable: {exc}") from None


def _state_for_save(iteration: int, model_chunks: Sequence[Any], optimizer: Any,  # noqa: ANN401
                    scheduler: Any, extra_json: str) -> dict[str, Any]:  # noqa: ANN401
    state: dict[str, Any] = {"checkpoint_version": CHECKPOINT_VERSION, "iteration": iteration,
                             "ppodeck_extra": extra_json}
    state.update(_model_sharded(model_chunks))
    if optimizer is not None:
        _prime_optimizer_state(optimizer)
        # Megatron-LM passes the whole state dict: the optimizer finds params by identity
        state["optimizer"] = optimizer.sharded_state_dict(state, metadata=_metadata())
    if scheduler is not None:
        state["opt_param_scheduler"] = scheduler.state_dict()
    state["rng_state"] = _rng_sharded_object(_collect_rng_states())
    return state


def _save_state(state: dict[str, Any], final: Path, *, tracker_tag: str,
                summary: Mapping[str, Any]) -> None:
    """Write `state` to a temp dir, publish it as `final` and point the tracker at it."""
    from megatron.core import dist_checkpointing

    root = final.parent
    needed = _check_free_space(state, root)
    tmp = _agree_tmp_dir(final)
    try:
        with device_scope():
            dist_checkpointing.save(state, str(tmp), content_metadata=dict(SHARDING_METADATA))
    except BaseException as exc:
        # the disk filled while writing when the error says so, or when what is left on it
        # (the partial shards still there) would not hold the checkpoint: torch's writer
        # reports a full disk as "PytorchStreamWriter failed writing file", without errno
        full = _is_disk_full(exc) or _free_bytes(root) < needed
        shutil.rmtree(tmp, ignore_errors=True)
        if full:
            raise _disk_full(root, tmp, "writing the checkpoint") from exc
        raise
    _barrier()  # every rank's shards are on disk before the directory becomes visible
    _on_rank0(lambda: _publish(tmp, final, tracker_tag, summary))


def _on_rank0(action: Callable[[], None]) -> None:
    """Run `action` on rank 0; every rank raises if it failed (so no rank waits forever)."""
    error: BaseException | None = None
    if _rank() == 0:
        try:
            action()
        except Exception as exc:  # noqa: BLE001 - re-raised below, on every rank
            error = exc
    message = [str(error) if error is not None else None]
    if _world() > 1:
        dist.broadcast_object_list(message, src=0)
    if error is not None:
        raise error
    if message[0] is not None:
        raise CheckpointError(f"rank 0 failed to publish the checkpoint: {message[0]}")


def _publish(tmp: Path, final: Path, tracker_tag: str, summary: Mapping[str, Any]) -> None:
    """ppodeck.json and the manifest, rename tmp -> final (replacing a same-iteration dir),
    then the tracker."""
    root = final.parent
    try:
        (tmp / EXTRA_FILE).write_text(json.dumps(dict(summary), indent=1, sort_keys=True))
        write_manifest(tmp)  # sizes and checksums, read back before a resume loads it
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno == errno.ENOSPC:
            raise _disk_full(root, tmp, "writing the checkpoint") from exc
        raise
    old = final.with_name(f"{final.name}.old{_TMP_MARK}{os.getpid()}")
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    write_tracker(root, tracker_tag)


def _agree_tmp_dir(final: Path) -> Path:
    """All ranks write into one temp dir named after rank 0's pid; rank 0 creates it."""
    name = [f"{final.name}{_TMP_MARK}{os.getpid()}-{socket.gethostname()}"]
    if _world() > 1:
        dist.broadcast_object_list(name, src=0)
    tmp = final.parent / name[0]
    if _rank() == 0:
        final.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_tmp_dirs(final.parent)
        tmp.mkdir()
    _barrier()
    return tmp


def _remove_stale_tmp_dirs(root: Path) -> None:
    # leftovers of a save that crashed; a run owns its save directory, so they are garbage
    for stale in root.glob(f"*{_TMP_MARK}*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)


def _check_free_space(state: dict[str, Any], root: Path) -> float:
    """Refuse before writing anything when the shards will not fit (all ranks agree); else
    the bytes they take, margin included."""
    needed = torch.tensor([_state_bytes(state)], dtype=torch.float64)
    if _world() > 1:
        dist.all_reduce(needed)
    free = float(_free_bytes(root))
    if needed.item() * _FREE_SPACE_MARGIN > free:
        raise CheckpointDiskFullError(
            f"not enough disk space to save a checkpoint in {root}: it needs about "
            f"{_gib(needed.item())} GiB and {_gib(free)} GiB are free. Earlier checkpoints "
            "are intact; free some space or point --save elsewhere.")
    return needed.item() * _FREE_SPACE_MARGIN


def _free_bytes(path: Path) -> int:
    while not path.exists() and path != path.parent:  # the save dir may not exist yet
        path = path.parent
    return shutil.disk_usage(path).free


def _state_bytes(state: Mapping[str, Any]) -> int:
    """Bytes this rank writes: the data of its main-replica sharded tensors."""
    from megatron.core.dist_checkpointing.dict_utils import nested_values
    from megatron.core.dist_checkpointing.mapping import (
        ShardedTensor,
        ShardedTensorFactory,
        is_main_replica,
    )

    total = 0
    for value in nested_values(dict(state)):
        if isinstance(value, (ShardedTensor, ShardedTensorFactory)) and isinstance(
                value.data, torch.Tensor) and is_main_replica(value.replica_id):
            total += value.data.numel() * value.data.element_size()
    return total


def _is_disk_full(exc: BaseException) -> bool:
    """ENOSPC anywhere in the chain, including megatron's per-rank failure dict."""
    seen: set[int] = set()
    todo: list[Any] = [exc]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, OSError) and item.errno == errno.ENOSPC:
            return True
        if isinstance(item, BaseException):
            if "No space left on device" in str(item):
                return True
            # megatron's CheckpointException keeps its per-rank failures in rank_to_exc
            todo += [item.__cause__, item.__context__, *item.args,
                     getattr(item, "rank_to_exc", None)]
        elif isinstance(item, (tuple, list)):
            todo += list(item)
        elif isinstance(item, Mapping):  # rank -> exception, or (exception, trace) in torch's
            todo += list(item.values())
    return False


def _disk_full(root: Path, where: Path, doing: str) -> CheckpointDiskFullError:
    free = _gib(_free_bytes(root))
    return CheckpointDiskFullError(
        f"disk full while {doing} in {where} ({free} GiB free on {root}); the partial "
        "checkpoint was removed and earlier checkpoints and the tracker are intact. Free some "
        "space or point --save elsewhere.")


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.2f}"


# --------------------------------------------------------------------------------------------
# load
# --------------------------------------------------------------------------------------------
def load_checkpoint(load_dir: str | os.PathLike[str], model_chunks: Sequence[Any],
                    optimizer: Any, scheduler: Any, *, load_optim: bool = True,  # noqa: ANN401
                    load_rng: bool = True, strict_model: bool = True, finetune: bool = False,
                    iteration: int | None = None) -> dict[str, Any]:
    """Load the tracker's checkpoint (or `iteration`) into the model, optimizer, scheduler, RNG.

    `release` (a converted HF checkpoint) and `finetune` load the model weights only (miles'
    fresh-run fallback: finetune = no_load_optim = no_load_rng). Returns
    {"iteration", "release", "start_rollout_id", "extra", "loaded_optim", "loaded_rng",
    "missing_keys", "notes", "path"}; start_rollout_id is iteration + 1 when resuming, else 0.
    """
    path = checkpoint_path(load_dir, iteration)
    return _load(path, model_chunks, optimizer, scheduler, load_optim=load_optim,
                 load_rng=load_rng, strict_model=strict_model, finetune=finetune, drop=())


def load_for_critic(load_dir: str | os.PathLike[str], model_chunks: Sequence[Any],
                    optimizer: Any, scheduler: Any, *, load_optim: bool = True,  # noqa: ANN401
                    load_rng: bool = True, finetune: bool = False,
                    iteration: int | None = None) -> dict[str, Any]:
    """load_checkpoint for the critic, which may be pointed at a POLICY checkpoint.

    A fresh run loads the critic from --ref-load (the actor's weights): the checkpoint has
    no value head (an LM head of another shape, or no output layer at all with tied
    embeddings). Then the trunk is loaded, the value head keeps its fresh init, and the
    optimizer state (the actor's) is not loaded; `notes` says so.
    """
    path = checkpoint_path(load_dir, iteration)
    if _has_value_head(_checkpoint_keys(path)[0]):
        return _load(path, model_chunks, optimizer, scheduler, load_optim=load_optim,
                     load_rng=load_rng, strict_model=True, finetune=finetune, drop=())
    notes = [CRITIC_HEAD_NOTE]
    weights_only = finetune or path.name == RELEASE
    if not weights_only:
        notes.append(f"the critic was resumed from {path}, a policy checkpoint: its optimizer "
                     "state was not loaded; pass --critic-load <save>_critic to resume the "
                     "critic's own checkpoint")
    result = _load(path, model_chunks, optimizer, scheduler, load_optim=False,
                   load_rng=load_rng and not weights_only, strict_model=True,
                   finetune=finetune, drop=HEAD_KEYS)
    result["notes"] = notes + result["notes"]
    return result


def _load(path: Path, model_chunks: Sequence[Any], optimizer: Any, scheduler: Any, *,  # noqa: ANN401
          load_optim: bool, load_rng: bool, strict_model: bool, finetune: bool,
          drop: Iterable[str]) -> dict[str, Any]:
    from megatron.core import dist_checkpointing

    if not (path / "metadata.json").is_file():
        raise CheckpointError(f"{path} is not a torch_dist checkpoint (no metadata.json); "
                              "was it written completely?")
    release = path.name == RELEASE
    weights_only = release or finetune
    load_optim = load_optim and not weights_only and optimizer is not None
    load_rng = load_rng and not weights_only
    tensors, objects = _checkpoint_keys(path)
    notes: list[str] = []
    with _megatron_lm_common(path), device_scope():
        metadata = dist_checkpointing.load_content_metadata(str(path)) or dict(SHARDING_METADATA)
        model_state = _model_sharded(model_chunks, metadata)
        _refuse_critic_into_actor(path, model_chunks, tensors)
        dropped, missing = _drop_unloadable(model_state, tensors, objects, set(drop),
                                            strict_model, path)
        request: dict[str, Any] = dict(model_state)
        if load_optim:
            _check_optimizer_loadable(path, tensors, missing)
            _prime_optimizer_state(optimizer)
            request["optimizer"] = optimizer.sharded_state_dict(
                model_state, is_loading=True, metadata=_metadata(metadata))
        rng_request = _rng_sharded_object(None)
        if load_rng and (rng_request.key, tuple(rng_request.global_shape)) in objects:
            request["rng_state"] = rng_request
        elif load_rng:
            notes.append(f"{path} has no RNG state for this parallel layout; RNG not restored")
            load_rng = False
        loaded = dist_checkpointing.load(request, str(path))
        _apply_model(model_chunks, loaded, strict=not dropped)
        if load_optim:
            # no_grad: with fp32 params the distributed optimizer's main params are views of
            # the (grad-requiring) model params, and it copies into them in place
            with torch.no_grad():
                optimizer.load_state_dict(loaded["optimizer"])
            _restore_adam_steps(optimizer, loaded["optimizer"])
            if scheduler is not None and "opt_param_scheduler" in loaded:
                scheduler.load_state_dict(loaded["opt_param_scheduler"])
        elif optimizer is not None:
            # fp32 main params / distributed-optimizer shards must follow the new weights
            optimizer.reload_model_params()
    if load_rng:
        _restore_rng_states(loaded["rng_state"])
    iteration = 0 if release else int(loaded.get("iteration", 0))
    return {
        "iteration": iteration,
        "release": release,
        "start_rollout_id": 0 if weights_only else iteration + 1,
        "extra": json.loads(loaded.get("ppodeck_extra") or "{}"),
        "loaded_optim": load_optim,
        "loaded_rng": load_rng,
        "missing_keys": sorted(missing),
        "notes": notes,
        "path": str(path),
    }


@contextlib.contextmanager
def _megatron_lm_common(path: Path) -> Iterator[None]:
    """Let torch.load(weights_only=True) read common.pt files written by Megatron-LM.

    Megatron-LM (and miles' converter, which calls it) stores its argparse `args` in
    common.pt; its sharded objects are unpickled without restriction anyway.
    """
    import argparse
    import pickle

    from megatron.core.transformer.enums import AttnBackend, ModelType

    try:
        with torch.serialization.safe_globals([argparse.Namespace, AttnBackend, ModelType]):
            yield
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[-1][:300]
        raise CheckpointError(f"{path}/common.pt holds objects PPO Deck does not unpickle "
                              f"(written by another Megatron version?): {first}") from exc


def _check_optimizer_loadable(path: Path, tensors: Mapping[str, tuple[int, ...]],
                              missing: set[str]) -> None:
    if not any(key.startswith("optimizer.") for key in tensors):
        raise CheckpointError(f"{path} holds no optimizer state; pass --no-load-optim to load "
                              "the weights only")
    if missing:
        raise CheckpointError(f"{path} lacks model weights ({sorted(missing)[:3]}), so its "
                              "optimizer state cannot be matched; pass --no-load-optim")


def _checkpoint_keys(path: Path) -> tuple[dict[str, tuple[int, ...]], set[tuple[str, tuple]]]:
    """(tensor key -> global shape, {(object key, global shape)}) stored in the checkpoint."""
    from megatron.core.dist_checkpointing.mapping import ShardedTensor
    from megatron.core.dist_checkpointing.serialization import load_sharded_metadata

    sharded = load_sharded_metadata(str(path))
    tensors: dict[str, tuple[int, ...]] = {}
    objects: set[tuple[str, tuple]] = set()
    for value in sharded.values():
        if isinstance(value, ShardedTensor):
            tensors[value.key] = tuple(value.global_shape)
        else:
            objects.add((value.key, tuple(value.global_shape)))
    return tensors, objects


def _has_value_head(tensors: Mapping[str, tuple[int, ...]]) -> bool:
    weight, bias = (tensors.get(k) for k in HEAD_KEYS)
    return weight is not None and len(weight) == 2 and weight[0] == 1 and bias == (1,)


def _refuse_critic_into_actor(path: Path, model_chunks: Sequence[Any],
                              tensors: Mapping[str, tuple[int, ...]]) -> None:
    # a tied actor requests no output layer, so it would silently load a critic's trunk
    from .model import ValueHead

    if not _has_value_head(tensors):
        return
    heads = [getattr(chunk, "output_layer", None) for chunk in _unwrap(model_chunks)]
    if not any(isinstance(head, ValueHead) for head in heads):
        raise CheckpointError(f"{path} is a critic checkpoint (it has a value head); a policy "
                              "model cannot load it: check --load / --ref-load")


def _drop_unloadable(model_state: dict[str, Any], tensors: Mapping[str, tuple[int, ...]],
                     objects: set[tuple[str, tuple]], drop: set[str], strict: bool,
                     path: Path) -> tuple[bool, set[str]]:
    """Remove requests the checkpoint cannot satisfy; raise for real weights when strict.

    `drop` names keys (after the chunk prefix) whose fresh init is kept on purpose.
    Returns (anything dropped, the weight keys dropped as missing or mismatched).
    """
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor

    dropped = False
    missing: set[str] = set()
    problems: list[str] = []
    for chunk_key, chunk_state in model_state.items():
        for name in list(chunk_state):
            item = chunk_state[name]
            if name in drop:
                del chunk_state[name]
                dropped = True
            elif isinstance(item, ShardedObject):
                if (item.key, tuple(item.global_shape)) not in objects:
                    # an empty _extra_state that another layer spec did not write
                    del chunk_state[name]
                    dropped = True
            elif isinstance(item, ShardedTensor):
                problem = _tensor_problem(item, tensors.get(item.key))
                if problem:
                    problems.append(problem)
                    missing.add(f"{chunk_key}.{name}")
                    del chunk_state[name]
                    dropped = True
    if problems and strict:
        shown = "; ".join(problems[:5]) + (f" (and {len(problems) - 5} more)"
                                           if len(problems) > 5 else "")
        raise CheckpointError(f"{path} does not match the model: {shown}. Check the model flags "
                              "(--num-layers, --hidden-size, ...) against the checkpoint.")
    return dropped, missing


def _tensor_problem(item: Any, stored: tuple[int, ...] | None) -> str | None:  # noqa: ANN401
    if stored is None:
        return f"{item.key} is missing"
    # allow_shape_mismatch marks vocab padding (embedding, LM head): megatron pads/trims it
    if stored != tuple(item.global_shape) and not item.allow_shape_mismatch:
        return f"{item.key} has shape {stored}, the model wants {tuple(item.global_shape)}"
    return None


def _apply_model(model_chunks: Sequence[Any], loaded: Mapping[str, Any], *, strict: bool) -> None:
    for key, chunk in zip(_model_keys(model_chunks), _unwrap(model_chunks), strict=True):
        chunk.load_state_dict(loaded[key], strict=strict)


# --------------------------------------------------------------------------------------------
# model, optimizer and RNG pieces
# --------------------------------------------------------------------------------------------
def _metadata(saved: Mapping[str, Any] | None = None) -> dict[str, Any]:
    # a fresh dict per call: megatron adds process groups to it in place
    return dict(saved) if saved is not None else dict(SHARDING_METADATA)


def _unwrap(model_chunks: Sequence[Any]) -> list[Any]:
    from megatron.core.utils import unwrap_model

    return unwrap_model(list(model_chunks))


def _model_keys(model_chunks: Sequence[Any]) -> list[str]:
    # Megatron-LM: "model" for one chunk, "model0", "model1" ... with virtual pipelining
    n = len(model_chunks)
    return ["model"] if n == 1 else [f"model{i}" for i in range(n)]


def _model_sharded(model_chunks: Sequence[Any],
                   metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    # unwrapped (no DDP "module." prefix) so keys match Megatron-LM and miles checkpoints
    return {key: chunk.sharded_state_dict(metadata=_metadata(metadata))
            for key, chunk in zip(_model_keys(model_chunks), _unwrap(model_chunks), strict=True)}


def _prime_optimizer_state(optimizer: Any) -> None:  # noqa: ANN401
    """Give a never-stepped torch Adam zero states and step 0 (what its first step would).

    Shim for megatron-core 0.16 without Apex/TE (our CPU and GPU machines): there
    DistributedOptimizer.state_dict() asserts every param state holds an Adam "step", which a
    fresh optimizer lacks, so loading into a fresh worker (and saving before the first step)
    fails. Loading overwrites these states in place.
    """
    from megatron.core.optimizer import distrib_optimizer

    if distrib_optimizer.HAVE_APEX_OR_TE:
        return
    for inner in getattr(optimizer, "chained_optimizers", None) or [optimizer]:
        torch_opt = getattr(inner, "optimizer", None)
        if not isinstance(inner, distrib_optimizer.DistributedOptimizer) or not isinstance(
                torch_opt, torch.optim.Adam | torch.optim.AdamW):
            continue
        for group in torch_opt.param_groups:
            for param in group["params"]:
                state = torch_opt.state[param]
                if "exp_avg" not in state:
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                state.setdefault("step", torch.tensor(0.0))


def _restore_adam_steps(optimizer: Any, loaded: Any) -> None:  # noqa: ANN401
    """Give every param its own Adam "step" again, read from the checkpoint's param groups.

    Shim for megatron-core 0.16's DistributedOptimizer with torch's Adam (no Apex/TE):
    load_state_dict() hands all params ONE shared step tensor (torch's Adam then adds 1 per
    param per step) and the dp_reshardable load copies the stale pre-load step over it.
    """
    from megatron.core.optimizer import distrib_optimizer

    if distrib_optimizer.HAVE_APEX_OR_TE:
        return
    inners = getattr(optimizer, "chained_optimizers", None) or [optimizer]
    if len(inners) == 1:
        states = [loaded]
    else:
        states = [v for _, v in sorted(loaded.items())] if isinstance(loaded, Mapping) else loaded
    for inner, state in zip(inners, states, strict=True):
        if not isinstance(inner, distrib_optimizer.DistributedOptimizer):
            continue
        steps = {g.get("step") for g in state["optimizer"]["param_groups"]} - {None}
        if len(steps) != 1:
            continue
        step = float(steps.pop())
        for param_state in inner.optimizer.state.values():
            param_state["step"] = torch.tensor(step)


def _collect_rng_states() -> list[dict[str, Any]]:
    """This rank's RNG states, gathered over data-parallel ranks (index = DP rank)."""
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel

    state: dict[str, Any] = {
        "random_rng_state": random.getstate(),
        "np_rng_state": np.random.get_state(),
        "torch_rng_state": torch.get_rng_state(),
        "rng_tracker_states": copy.deepcopy(tensor_parallel.get_cuda_rng_tracker().get_states()),
    }
    if has_cuda():
        state["cuda_rng_state"] = torch.cuda.get_rng_state()
    group = ps.get_data_parallel_group(with_context_parallel=True)
    size = dist.get_world_size(group)
    if size == 1:
        return [state]
    states: list[Any] = [None] * size
    dist.all_gather_object(states, state, group=group)
    return states


def _rng_sharded_object(states: list[dict[str, Any]] | None) -> Any:  # noqa: ANN401
    """Megatron-LM's layout: one object per (pp, tp) rank, replicated over DP."""
    from megatron.core import parallel_state as ps
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    return ShardedObject(
        "rng_state", states,
        (ps.get_pipeline_model_parallel_world_size(), ps.get_tensor_model_parallel_world_size()),
        (ps.get_pipeline_model_parallel_rank(), ps.get_tensor_model_parallel_rank()),
        replica_id=ps.get_data_parallel_rank(with_context_parallel=True))


def _restore_rng_states(states: Sequence[Mapping[str, Any]]) -> None:
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel

    dp_rank = ps.get_data_parallel_rank(with_context_parallel=True)
    state = states[dp_rank] if len(states) > dp_rank else states[0]
    random.setstate(state["random_rng_state"])
    np.random.set_state(state["np_rng_state"])
    torch.set_rng_state(state["torch_rng_state"])
    if has_cuda() and state.get("cuda_rng_state") is not None:
        torch.cuda.set_rng_state(state["cuda_rng_state"])
    tracker_states = state.get("rng_tracker_states")
    if tracker_states:
        tensor_parallel.get_cuda_rng_tracker().set_states(dict(tracker_states))


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def _barrier() -> None:
    if _world() > 1:
        dist.barrier()


# --------------------------------------------------------------------------------------------
# HF -> torch_dist (miles' tools/convert_hf_to_torch_dist.py layout)
# --------------------------------------------------------------------------------------------
# model flags that must agree with the HF config when the run sets them
_SHAPE_FLAGS = {"num_layers": "--num-layers", "hidden_size": "--hidden-size",
                "ffn_hidden_size": "--ffn-hidden-size",
                "num_attention_heads": "--num-attention-heads", "kv_channels": "--kv-channels",
                "vocab_size": "--vocab-size"}
# flags that change the network without changing a tensor's shape: (ModelShape field, flag)
_FEATURE_FLAGS = {"add_qkv_bias": ("add_qkv_bias", "--add-qkv-bias"),
                  "use_rope_scaling": ("rope_scaling", "--use-rope-scaling"),
                  "rotary_scaling_factor": ("rope_scaling_factor", "--rotary-scaling-factor"),
                  "qk_layernorm": ("qk_layernorm", "--qk-layernorm")}


def convert_hf_to_torch_dist(hf_path: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                             args: Mapping[str, Any] | None = None, *,
                             log: Callable[[str], None] = print) -> Path:
    """Convert an HF checkpoint into `out_dir/release/` + tracker "release" (actor weights).

    Skips (and says so through `log`) when the tracker already says "release". `args` (the
    resolved run flags, optional) are cross-checked against the HF config. Runs in a world
    of size 1: the one already initialized, or its own on a free local port.
    """
    out = Path(out_dir)
    if read_tracker(out) == RELEASE:
        log(f"{out} already holds a converted checkpoint ({TRACKER} says release); skipped")
        return out
    from ..model.convert import load_hf_checkpoint

    log(f"reading the HF checkpoint {hf_path}")
    hf_config, hf_state = load_hf_checkpoint(hf_path)
    shape = _shape_for(hf_config, args)
    owns_world = _ensure_single_rank_world()
    try:
        log("building the Megatron model")
        model = _build_converted_model(shape, hf_state)
        del hf_state
        log(f"writing torch_dist to {out / RELEASE}")
        with device_scope():
            state: dict[str, Any] = {
                "checkpoint_version": CHECKPOINT_VERSION, "iteration": 0,
                "ppodeck_extra": json.dumps({"converted_from": str(hf_path)})}
            state.update(_model_sharded([model]))
        _save_state(state, out / RELEASE, tracker_tag=RELEASE,
                    summary={"iteration": RELEASE, "extra": {"converted_from": str(hf_path)}})
    finally:
        if owns_world:
            from .platform import shutdown_distributed

            shutdown_distributed()
    log(f"converted {hf_path} -> {out} (release)")
    return out


def _shape_for(hf_config: Any, args: Mapping[str, Any] | None) -> Any:  # noqa: ANN401
    from ..model.convert import ConversionError, shape_from_hf_config

    shape = shape_from_hf_config(hf_config)
    for dest, flag in _SHAPE_FLAGS.items():
        wanted = (args or {}).get(dest)
        if wanted is not None and int(wanted) != getattr(shape, dest):
            raise ConversionError(f"{flag} {wanted} does not match the HF checkpoint "
                                  f"({getattr(shape, dest)}); fix the model flags or the "
                                  "checkpoint path")
    for dest, (field, flag) in _FEATURE_FLAGS.items():
        wanted = (args or {}).get(dest)
        if field == "rope_scaling_factor" and not (shape.rope_scaling
                                                   and (args or {}).get("use_rope_scaling")):
            continue
        if wanted is not None and wanted != getattr(shape, field):
            ours, theirs = (_on_off(v) for v in (wanted, getattr(shape, field)))
            raise ConversionError(f"{flag} {ours} does not match the HF checkpoint "
                                  f"({theirs}); fix the model flags or the checkpoint path")
    return shape


def _on_off(value: object) -> str:
    return ("on" if value else "off") if isinstance(value, bool) else f"{value}"


def _ensure_single_rank_world() -> bool:
    """True when this call started the (size 1) world and must shut it down."""
    if dist.is_initialized():
        if dist.get_world_size() != 1:
            raise CheckpointError("convert_hf_to_torch_dist runs on one rank; call it outside "
                                  "the training world (e.g. `ppodeck prepare`)")
        return False
    from .platform import Parallelism, init_distributed

    with socket.socket() as probe:  # a free port for this private world
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    init_distributed(0, 1, "127.0.0.1", port, Parallelism(), seed=1234)
    return True


def _build_converted_model(shape: Any, hf_state: dict[str, torch.Tensor]) -> Any:  # noqa: ANN401
    from ..model.convert import arch_for, hf_to_mcore
    from .model import build_gpt, transformer_config
    from .platform import Parallelism, device

    bf16 = hf_state["model.embed_tokens.weight"].dtype == torch.bfloat16
    with device_scope():
        config = transformer_config(shape, Parallelism(), bf16=bf16)
        config.perform_initialization = False  # every weight is overwritten right away
        model = build_gpt(shape, "actor", config).to(device())  # local-spec norms start on host
        mcore_state = hf_to_mcore(hf_state, shape, arch_for(shape), role="actor")
        missing, unexpected = model.load_state_dict(mcore_state, strict=False)
    missing = [k for k in missing if not k.endswith("_extra_state")]
    if missing or unexpected:
        from ..model.convert import ConversionError

        raise ConversionError(f"converted weights do not fit the model: missing {missing[:3]}, "
                              f"unexpected {unexpected[:3]}")
    return model


# --------------------------------------------------------------------------------------------
# torch_dist -> HF (the way back: miles' tools/convert_torch_dist_to_hf.py, actor weights)
# --------------------------------------------------------------------------------------------
def convert_torch_dist_to_hf(ckpt_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                             args: Mapping[str, Any], *, iteration: int | None = None,
                             log: Callable[[str], None] = print) -> Path:
    """The actor weights of a torch_dist checkpoint (its tracker's iteration, or `iteration`)
    -> `out_dir` with config.json and model.safetensors, loadable by transformers'
    from_pretrained. `args`: the run's resolved flags (the model shape). One rank, as
    convert_hf_to_torch_dist."""
    from safetensors.torch import save_file

    from ..model.convert import arch_for, mcore_to_hf, save_hf_config
    from ..model.shape import ModelShape

    shape = ModelShape.from_args(args)
    out = Path(out_dir)
    owns_world = _ensure_single_rank_world()
    try:
        model = _build_empty_actor(shape, bf16=bool(args.get("bf16")))
        loaded = load_checkpoint(ckpt_dir, [model], None, None, finetune=True,
                                 iteration=iteration)
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()
                 if not k.endswith("_extra_state")}
    finally:
        if owns_world:
            from .platform import shutdown_distributed

            shutdown_distributed()
    arch = arch_for(shape)
    hf_state = mcore_to_hf(state, shape, arch)
    out.mkdir(parents=True, exist_ok=True)
    save_hf_config(shape, arch, out)
    save_file({k: v.contiguous() for k, v in hf_state.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    log(f"converted {loaded['path']} -> {out} ({arch}, {len(hf_state)} tensors)")
    return out


def _build_empty_actor(shape: Any, *, bf16: bool) -> Any:  # noqa: ANN401
    from .model import build_gpt, transformer_config
    from .platform import Parallelism, device

    with device_scope():
        config = transformer_config(shape, Parallelism(), bf16=bf16)
        config.perform_initialization = False  # every weight is loaded right away
        return build_gpt(shape, "actor", config).to(device())
