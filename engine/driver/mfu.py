"""MFU per train phase: the model FLOPs a phase did over its wall time, against the GPU's peak.

FLOPs count the dense matmuls only (2 x parameters per token forward, 4 x backward; attention
scores left out, a few percent at these sequence lengths): the critic computes values (forward)
then trains (forward + backward) on every sample once; the actor computes old log-probs, the
reference's when a KL term needs them, then trains. The phase's wall time includes its wake and
sleep (offload moves), so this is the phase's MFU, not the kernels'. The peak is this machine's
measured matmul rate where the launch probe measured one (engine/host/probe.py: bf16 per GPU,
fp32 for the whole CPU), else the GPU model's datasheet figure; `perf/mfu_peak_tflops` says
which number was used (per GPU, as miles logs it). On CPU without a probe only the achieved
TFLOP/s is reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.forecast import GPU_FACTS
from ..host.probe import MachineFacts


def trained_tokens(batch: Any) -> int:  # noqa: ANN401 - a RolloutBatch
    return sum(len(tokens) for tokens in batch.tokens)


def phase_flops(args: Mapping[str, Any], params: int, tokens: int, role: str) -> float:
    forwards = 1  # values (critic) or old log-probs (actor)
    if role == "actor" and args["with_ref"]:
        forwards += 1  # the reference model's log-probs
    return 2.0 * params * tokens * forwards + 6.0 * params * tokens


def device_peak(machine_kind: str, facts: MachineFacts | None = None) -> float | None:
    """FLOP/s one training device does at most: the probe's measured matmul rate, else the
    datasheet's dense bf16 peak of the GPU model; None on CPU without a probe or on an
    unknown GPU (a driver on a CPU head node of a cluster names no GPU: no MFU then)."""
    if machine_kind.startswith("gpu:"):
        if facts is not None and facts.on_gpu and facts.bf16_matmul_TFLOPs:
            return facts.bf16_matmul_TFLOPs * 1e12
        return next((flops for model, (flops, _) in GPU_FACTS.items() if model in machine_kind),
                    None)
    if facts is not None and facts.cpu_fp32_matmul_TFLOPs:
        return facts.cpu_fp32_matmul_TFLOPs * 1e12
    return None


def peak_flops(machine_kind: str, gpus: int, facts: MachineFacts | None = None) -> float | None:
    """The peak of the devices that train: `gpus` GPUs, or the CPU's cores (shared by its
    ranks: not multiplied)."""
    peak = device_peak(machine_kind, facts)
    if peak is None:
        return None
    return peak * max(1, gpus) if machine_kind.startswith("gpu:") else peak


def mfu_metrics(args: Mapping[str, Any], params: int | None, tokens: int,
                seconds: Mapping[str, float], machine_kind: str,
                facts: MachineFacts | None = None) -> dict[str, float]:
    """perf/<role>_train_tflops and, with a peak, perf/<role>_train_mfu and
    perf/mfu_peak_tflops."""
    if not params or not tokens:
        return {}
    peak = peak_flops(machine_kind, int(args["world_size"] or 1), facts)
    out: dict[str, float] = {}
    if peak:
        out["perf/mfu_peak_tflops"] = (device_peak(machine_kind, facts) or 0.0) / 1e12
    for role, spent in seconds.items():
        if spent <= 0:
            continue
        achieved = phase_flops(args, params, tokens, role) / spent
        out[f"perf/{role}_train_tflops"] = achieved / 1e12
        if peak:
            out[f"perf/{role}_train_mfu"] = achieved / peak
    return out
