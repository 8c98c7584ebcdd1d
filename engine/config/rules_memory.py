"""engine.* memory rules: the run's memory estimate (engine/config/memory.py) against what this
machine holds now, on each GPU the run needs and in host memory.

The facts come in the Machine (engine/config/machine.py): its `holdings` is a reading of
engine/host/memory.py (free memory per GPU, the processes holding it, the host's available RAM),
at most a few seconds old in check(), read afresh by the launch pre-flight. A Machine without a
reading (tests, a probe that failed) is judged on its RAM size alone, and GPUs are not judged.
A Ray cluster is judged when the run reaches it, not here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .issues import Out
from .issues import add as _issue
from .memory import (
    HOST_USABLE_FRACTION,
    count_params,
    cpu_host_gib,
    gpu_peaks_gib,
    host_offload_gib,
)

if TYPE_CHECKING:
    from ..host.memory import GpuMemory
    from .machine import Machine

GIB = float(1 << 30)
# the codes the launch pre-flight re-checks with a fresh reading
MEMORY_CODES = frozenset({"engine.gpu_memory", "engine.host_memory", "engine.host_memory_cpu"})


def memory_rules(r: dict, m: Machine, out: Out, on_cluster: bool) -> None:
    if on_cluster:
        return
    params = count_params(r)
    if m.cuda:
        _gpu_memory(r, m, params, out)
        _offloaded_host_memory(r, m, params, out)
    else:
        _cpu_host_memory(r, m, params, out)


# ---- GPUs -----------------------------------------------------------------------------------


def _gpu_memory(r: dict, m: Machine, params: int | None, out: Out) -> None:
    """Each GPU the run will take must have its share free: the train peak on the first
    world-size GPUs (a private Ray hands out the visible GPUs in order), the rollout's peak on
    the next ones when it has its own."""
    reading = m.holdings
    if reading is None:
        return
    if reading.gpus is None:
        if reading.gpu_note:
            _issue(out, "info", "engine.gpu_memory_unread", ("actor_num_gpus_per_node",),
                   f"the GPUs' free memory was not read ({reading.gpu_note}): whether the run "
                   "fits beside what they already hold is not checked.")
        return
    needed, world = r["placement_bundles"], r["world_size"]
    if not isinstance(needed, int) or not isinstance(world, int) or needed > len(reading.gpus):
        return  # engine.gpus_missing says so
    taken = reading.gpus[:needed]
    peaks = gpu_peaks_gib(r, params, m.env, gpu_total_gib=min(g.total_gib for g in taken))
    if peaks is None:
        return
    wants = [(gpu, peaks["rollout" if gpu.index >= world and "rollout" in peaks else "train"])
             for gpu in taken]
    short = [(gpu, need) for gpu, need in wants if need > gpu.free_gib]
    if short:
        _gpu_refusal(r, short, reading.gpus[needed:], out)
        return
    shared = [(gpu, need) for gpu, need in wants if gpu.holders]
    if shared:
        said = "; ".join(f"GPU {g.index}: {need:.1f} GiB of its {g.free_gib:.1f} free, beside "
                         f"{_holders(g)}" for g, need in shared)
        _issue(out, "info", "engine.gpu_memory_shared", ("actor_num_gpus_per_node",),
               f"the run's GPUs already hold other processes' memory, and its estimate still "
               f"fits: {said}.")


def _gpu_refusal(r: dict, short: list[tuple[GpuMemory, float]],
                 spare: Sequence[GpuMemory], out: Out) -> None:
    said = "; ".join(f"GPU {g.index} has {g.free_gib:.1f} GiB free of {g.total_gib:.1f} GiB "
                     f"(held: {_holders(g)})" for g, _ in short)
    need = max(n for _, n in short)
    runs = sorted({p.run_id for g, _ in short for p in g.holders if p.run_id})
    fixes = [f"stop run {run} (`ppodeck stop {run}`) or wait for it to end" for run in runs]
    roomy = [g for g in spare if g.free_gib >= need]
    if roomy:
        fixes.append("take GPUs with room: CUDA_VISIBLE_DEVICES="
                     + ",".join(str(g.index) for g in roomy[:len(short)]))
    fixes.append("or make the run smaller per GPU (" + _shrink_hint(r) + ")")
    _issue(out, "error", "engine.gpu_memory", _memory_flags(r),
           f"the run needs about {need:.1f} GiB free per GPU at its peak (the memory "
           f"estimate in the derived values, less the driver's reserve), but {said}.",
           "; ".join(fixes))


def _holders(gpu: GpuMemory) -> str:
    if not gpu.holders:
        return "no process listed: the driver's reserve, or another container"
    return ", ".join(p.label() + ("" if p.used_gib is None else f" {p.used_gib:.1f} GiB")
                     for p in gpu.holders)


def _shrink_hint(r: dict) -> str:
    hints = ["a lower --max-tokens-per-gpu" if r["use_dynamic_batch_size"]
             else "a lower --micro-batch-size"]
    if r["rollout_backend"] != "hf":
        hints.append("a lower --sglang-mem-fraction-static")
    hints.append("more GPUs with --tensor-model-parallel-size or "
                 "--pipeline-model-parallel-size")
    return ", ".join(hints)


def _memory_flags(r: dict) -> tuple[str, ...]:
    flags = ["actor_num_gpus_per_node",
             "max_tokens_per_gpu" if r["use_dynamic_batch_size"] else "micro_batch_size"]
    if r["rollout_backend"] != "hf":
        flags.append("sglang_mem_fraction_static")
    return tuple(flags)


# ---- host memory ----------------------------------------------------------------------------


def host_figures(m: Machine) -> tuple[float | None, float | None]:
    """(RAM, available) in GiB: the reading's, else the probed RAM size with no availability."""
    reading = m.holdings
    ram = m.host_memory_bytes / GIB if m.host_memory_bytes is not None else None
    if reading is not None:
        return reading.host_total_gib or ram, reading.host_available_gib
    return ram, None


def _room(ram: float, available: float | None) -> tuple[float, str]:
    """What the run may take, and how to say it: the available memory when read (other
    processes hold the rest), else the usable share of the RAM."""
    if available is not None:
        return available, f"{available:.1f} GiB available of {ram:.1f} GiB RAM"
    usable = HOST_USABLE_FRACTION * ram
    return usable, f"{ram:.0f} GiB of RAM ({usable:.0f} GiB usable beside the OS)"


def _cpu_host_memory(r: dict, m: Machine, params: int | None, out: Out) -> None:
    """No GPU visible: every rank and the rollout are CPU processes holding their fp32 state in
    RAM. Past the available memory the machine swaps or the OOM killer ends the run."""
    ram, available = host_figures(m)
    need = cpu_host_gib(r, params)
    if ram is None or need is None:
        return
    room, said = _room(ram, available)
    if need["total"] <= room:
        return
    _issue(out, "error", "engine.host_memory_cpu",
           ("actor_num_gpus_per_node", "actor_num_nodes"),
           f"no GPU visible: the run's {r['world_size']} training rank(s) per model and its "
           f"rollout are CPU processes needing about {need['total']:.1f} GiB of host memory "
           f"(actor {need['actor']:.1f}, critic {need['critic']:.1f}, rollout "
           f"{need['rollout']:.1f}, processes {need['processes']:.1f} GiB: fp32 weights, grads "
           f"and Adam moments), and this machine has {said}.",
           "run it on a machine with the GPUs it is meant for, pick a CPU preset (tiny-cpu, "
           "smollm2-135m-cpu), or make it smaller (fewer ranks, a smaller model)")


def _offloaded_host_memory(r: dict, m: Machine, params: int | None, out: Out) -> None:
    """--offload-train parks both models' train state in pinned host memory between phases:
    it must fit the RAM of the node that holds it. Pinned memory cannot be swapped: past the
    RAM, the run fails; the processes' own memory (an upper bound, measured) only makes it
    tight."""
    ram, available = host_figures(m)
    need = host_offload_gib(r, params)
    if ram is None or need is None:
        return
    room, said = _room(ram, available)
    if need["total"] + need["processes"] <= room:
        return
    pinned = (f"--offload-train keeps {need['total']:.1f} GiB in pinned host memory on the "
              f"first node (actor {need['actor']:.1f}, critic {need['critic']:.1f}, rollout "
              f"{need['rollout']:.1f} GiB: bf16 params, fp32 master weights and Adam moments "
              "per GPU)")
    if need["total"] > room:
        _issue(out, "error", "engine.host_memory", ("offload_train",),
               f"{pinned}, but this machine has {said}.",
               "turn --offload-train off (the state stays on the GPUs), pick a smaller model, "
               "or spread the model over more GPUs or nodes (TP/PP) so each holds less")
        return
    _issue(out, "warning", "engine.host_memory_tight", ("offload_train",),
           f"{pinned}; with the run's processes (up to {need['processes']:.0f} GiB measured) "
           f"that is {need['total'] + need['processes']:.0f} GiB, and this machine has {said}: "
           "it may not fit.",
           "watch the host memory of the first rollouts (`ppodeck tail RUN` gpu events: "
           "rss_bytes), or turn --offload-train off")
