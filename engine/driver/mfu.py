"""MFU per train phase: the model FLOPs a phase did over its wall time, against the GPU's peak.

FLOPs count the dense matmuls only (2 x parameters per token forward, 4 x backward; attention
scores left out, a few percent at these sequence lengths): the critic computes values (forward)
then trains (forward + backward) on every sample once; the actor computes old log-probs, the
reference's when a KL term needs them, then trains. The phase's wall time includes its wake and
sleep (offload moves), so this is the phase's MFU, not the kernels'. On CPU there is no peak:
only the achieved TFLOP/s is reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.forecast import GPU_FACTS


def trained_tokens(batch: Any) -> int:  # noqa: ANN401 - a RolloutBatch
    return sum(len(tokens) for tokens in batch.tokens)


def phase_flops(args: Mapping[str, Any], params: int, tokens: int, role: str) -> float:
    forwards = 1  # values (critic) or old log-probs (actor)
    if role == "actor" and args["with_ref"]:
        forwards += 1  # the reference model's log-probs
    return 2.0 * params * tokens * forwards + 6.0 * params * tokens


def peak_flops(machine_kind: str, gpus: int) -> float | None:
    """Dense bf16 peak of `gpus` GPUs of the driver machine's model; None on CPU or an
    unknown GPU (a driver on a CPU head node of a cluster names no GPU: no MFU then)."""
    if not machine_kind.startswith("gpu:"):
        return None
    for model, (flops, _bandwidth) in GPU_FACTS.items():
        if model in machine_kind:
            return flops * max(1, gpus)
    return None


def mfu_metrics(args: Mapping[str, Any], params: int | None, tokens: int,
                seconds: Mapping[str, float], machine_kind: str) -> dict[str, float]:
    """perf/<role>_train_tflops and, on a known GPU, perf/<role>_train_mfu."""
    if not params or not tokens:
        return {}
    peak = peak_flops(machine_kind, int(args["world_size"] or 1))
    out: dict[str, float] = {}
    for role, spent in seconds.items():
        if spent <= 0:
            continue
        achieved = phase_flops(args, params, tokens, role) / spent
        out[f"perf/{role}_train_tflops"] = achieved / 1e12
        if peak:
            out[f"perf/{role}_train_mfu"] = achieved / peak
    return out
