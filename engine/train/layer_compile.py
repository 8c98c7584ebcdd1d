"""Regional compilation: each Megatron TransformerLayer compiled whole with torch.compile.

Why: with per-op fusion (engine/train/fused.py) a train step was host-bound, Python launching
~40 kernels per layer forward and more in the backward. Compiled whole, a layer is one graph
forward and one backward: inductor fuses norms, RoPE, SwiGLU and the residual adds between
the GEMMs and the attention kernel, so the host launches fewer, larger kernels (the matmul
rate before and after: docs/performance.md, bench/gpu_bench.py).

- The layers of a model share one compiled graph (torch's "regional compilation": modules
  are traced as inputs, so identical layers reuse one cache entry). The sequence dim is
  marked dynamic from the first call, so new lengths reuse it; graphs differ by grad mode and
  for a batch of one (bench/gpu_compile_check.py lists recompiles). The batch dim is static
  where micro-batches have a fixed size (a graph per size: the size and a last, smaller one),
  dynamic under token-budget micro-batches (use-dynamic-batch-size), whose size changes every
  call: `_mark_tokens_dynamic` says what that costs.
- It needs the direct TP=1 linears (engine/train/fastpaths.py): Megatron's own linear calls
  `warnings.warn` on every call, which splits the graph.
- With layers compiled, the per-op compiled RoPE/RMSNorm/SwiGLU are not used (one compiler
  over the whole layer fuses better than nested compiled ops).
- A compile failure at a layer's first call warns once and that model's layers run eager.

PPODECK_COMPILE_LAYERS=0 keeps the per-op fusion instead; PPODECK_FUSED=0 turns off both.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from .platform import LAYERS_ENV


class CompiledLayerCall:
    """A layer's compiled `_call_impl` (what nn.Module.compile installs), with an eager
    fallback shared by every layer of the model once one compile fails."""

    def __init__(self, layer: torch.nn.Module, state: dict[str, Any],
                 static_batch: bool) -> None:
        self.eager = layer._call_impl
        self.compiled = torch.compile(layer._call_impl)
        self.state = state  # {"failed": bool, "why": str, "said": bool}, one per model
        self.static_batch = static_batch

    def __call__(self, *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
        if self.state["failed"]:
            return self.eager(*args, **kwargs)
        _mark_tokens_dynamic(kwargs, self.static_batch)
        try:
            return self.compiled(*args, **kwargs)
        except torch.OutOfMemoryError:
            raise
        except Exception as err:  # noqa: BLE001 - a compiler failure must not stop training
            out = self.eager(*args, **kwargs)  # a genuine error raises again here
            self.state["failed"] = True
            why = (f"transformer layers: torch.compile failed ({type(err).__name__}: "
                   f"{str(err)[:300]}); the layers run eager from now on")
            self.state["why"] = why
            warnings.warn(why, stacklevel=2)
            return out


def _mark_tokens_dynamic(kwargs: dict[str, Any], static_batch: bool) -> None:
    """The sequence dim dynamic from the first call (micro-batches are right-padded [s, b] of
    varying length), so the first graph already serves every length; the hidden width stays
    static for the kernels; the batch dim static (`static_batch`: marked so, which also keeps
    dynamo from making it dynamic when a second size comes) or dynamic too.
    Why not always dynamic: with batch and sequence both symbolic, inductor indexes some
    backward kernels with 64-bit divisions by runtime sizes, and the static batch dim trained
    faster (the alternated runs: docs/performance.md). Token-budget micro-batches change
    the batch dim every call, so there it stays dynamic: a graph per size would compile at
    every new one."""
    import torch._dynamo

    hidden = kwargs.get("hidden_states")
    if isinstance(hidden, torch.Tensor) and hidden.dim() == 3:
        torch._dynamo.maybe_mark_dynamic(hidden, 0)
        if static_batch:
            torch._dynamo.mark_static(hidden, 1)
        else:
            torch._dynamo.maybe_mark_dynamic(hidden, 1)
    rope = kwargs.get("rotary_pos_emb")
    if isinstance(rope, torch.Tensor):
        torch._dynamo.maybe_mark_dynamic(rope, 0)


def compile_layers(model: torch.nn.Module, static_batch: bool = False) -> list[str]:
    """Compile every TransformerLayer of `model` in place; a log line when it did.
    `static_batch`: micro-batches of a fixed size (their batch dim compiled static)."""
    from megatron.core.transformer.transformer_layer import TransformerLayer

    from ..model.compile_budget import raise_global_recompile_limit

    layers = [m for m in model.modules() if isinstance(m, TransformerLayer)]
    if not layers:
        return []
    raise_global_recompile_limit()
    state: dict[str, Any] = {"failed": False}
    for layer in layers:
        layer._compiled_call_impl = CompiledLayerCall(layer, state, static_batch)
    return [line] if (line := compiled_line(model)) else []


def compiled_calls(model: torch.nn.Module) -> list[CompiledLayerCall]:
    return [call for m in model.modules()
            if isinstance(call := getattr(m, "_compiled_call_impl", None), CompiledLayerCall)]


def layers_compiled(model: torch.nn.Module) -> int:
    """How many of the model's layers run through CompiledLayerCall (for describe())."""
    return len(compiled_calls(model))


def new_fallback(model: torch.nn.Module) -> str | None:
    """The model's compile fallback, the first time it is asked after it happened (the driver
    announces it as a warning); None before, and after."""
    calls = compiled_calls(model)
    if not calls or not calls[0].state["failed"] or calls[0].state.get("said"):
        return None
    calls[0].state["said"] = True
    return str(calls[0].state.get("why", "transformer layers: torch.compile failed"))


def compiled_line(model: torch.nn.Module) -> str | None:
    """The log line of the model's compiled layers (describe(), compile_layers); None when
    none is compiled."""
    calls = compiled_calls(model)
    if not calls:
        return None
    batch = ("batch dim static: fixed-size micro-batches" if calls[0].static_batch else
             "batch dim dynamic: token-budget micro-batches")
    return (f"transformer layers: {len(calls)} compiled whole (one shared graph; {batch}; "
            f"{LAYERS_ENV}=0 for per-op fusion)")
