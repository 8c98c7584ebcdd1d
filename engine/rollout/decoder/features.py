"""The decoder's features: ONE table (FEATURES), and what derives from it.

A decoder variant is a `+`-joined list of feature names (PPODECK_DECODE=<name> in the hf
backend; bench/gpu_decode_profile.py measures variants side by side), `ref` the reference path.
Each row of FEATURES says what the feature needs, whether the hf backend's CUDA default runs it,
and the measurement that decided it (docs/performance.md has the commands and the history).
DecodeOptions has one bool field per row (the name with `_` for `-`; a test checks they match),
and parse_variant, DecodeOptions.name, the checks of what a feature needs and BACKEND_VARIANT
all read the table. REMOVED lists the features measured slower or superseded: naming one is an
error that says why it went and what to use instead.

Torch-free: light modules (config, CLI) may import it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

VARIANT_ENV = "PPODECK_DECODE"


@dataclass(frozen=True)
class Feature:
    name: str  # as named in PPODECK_DECODE; its DecodeOptions field is name with `_` for `-`
    does: str  # one line: what it changes
    default: bool  # in BACKEND_VARIANT (the hf backend's CUDA default); else opt-in
    measured: str  # the figure that decided it (the GPU of docs/performance.md, Qwen3-0.6B
    # shape, batch 64)
    needs: tuple[str, ...] = ()  # features that must be named with it
    implies: tuple[str, ...] = ()  # features it turns on (left out of the variant's name)
    # the kernels module whose Triton kernels it runs (they need CUDA with Triton importable,
    # or TRITON_INTERPRET=1), and what runs instead where they cannot (said in a warning)
    kernel: str | None = None
    fallback: str = ""

    @property
    def field(self) -> str:
        return self.name.replace("-", "_")

    @property
    def status(self) -> str:
        return "default" if self.default else "opt-in"


FEATURES: tuple[Feature, ...] = (
    Feature("fused", "fewer kernels per layer: fused RMSNorm, RoPE as roll + addcmul, residual "
            "adds inside the o/down GEMMs, logits written in place", default=True,
            measured="the fast variants' base: `ref` 10.2k tok/s against the default's "
            "36.5-36.9k (whole call)"),
    Feature("packed", "q/k/v and gate/up each one GEMM over weights packed side by side "
            "(copied at each call; ~0.6 GB more at 0.6B)", default=True, implies=("fused",),
            measured="in every measured fast variant; needed by folded-norms"),
    Feature("decode-attn", "attention as one Triton kernel for one query token that reads only "
            "each row's filled slots and writes the step's k/v itself",
            default=True, implies=("fused",), kernel="decode_attention",
            fallback="attention runs as batched matmuls (the same maths)",
            measured="cuDNN's flash kernel took 1.15 ms of a 2.8 ms step; superseded sdpa and "
            "window"),
    Feature("graph-sampling", "sampling, log-prob, next token and EOS flag inside the captured "
            "graph (Gumbel-max from a graph-registered generator): one replay per step",
            default=True, measured="removes the two host syncs of torch.multinomial per step"),
    Feature("fused-sampling", "graph-sampling's T=1 draw without filters in two Triton kernels "
            "(the same noise, no fp32 softmax/log-softmax written out)", default=True,
            needs=("graph-sampling",), kernel="sampling_kernel",
            fallback="graph-sampling samples with torch ops (the same draws)",
            measured="sampling was 0.17 ms of a step (fp32 softmax + log-softmax)"),
    Feature("fused-prefill", "the prompt pass in the fused step's building blocks over all "
            "B x P tokens at once", default=True,
            measured="about a third of the reference prefill's kernels per layer"),
    Feature("compiled", "each layer's elementwise work torch.compile'd (static shapes; the "
            "GEMMs stay cuBLAS); the unfolded layers of folded-norms where its kernels cannot run",
            default=False, implies=("fused",),
            measured="the default before folded-norms (1.75-1.84 ms per step); where "
            "folded-norms' kernels run nothing is left for it to compile: implied, not named"),
    Feature("folded-norms", "both RMSNorm weights folded into the packed weights; the row "
            "scales applied by project_heads (with q/k norms and RoPE) and folded_norms.gated",
            default=True, needs=("packed", "decode-attn"), implies=("compiled",),
            kernel="decode_attention",
            fallback="the RMSNorm weights stay in their own kernels and the layers run as "
            "`compiled` (the same maths)",
            measured="+8%: 1.65-1.70 ms per step against 1.75-1.84"),
    Feature("skinny-down", "the down projection by the skinny Triton GEMM at its measured "
            "tiling (skinny_gemm.TUNED); the other GEMMs stay cuBLAS", default=True,
            implies=("fused",), kernel="skinny_gemm",
            fallback="the down projection runs as a cuBLAS GEMM (the same maths)",
            measured="1.4-2.2% faster; the down GEMM 8.1 us against cuBLAS's 9.3"),
    Feature("cdf-sampling", "fused-sampling's T=1 draw by inverse CDF from one uniform per row "
            "(the same distribution as torch.multinomial, not its draws)", default=True,
            needs=("fused-sampling",), kernel="sampling_kernel",
            fallback="graph-sampling samples with torch ops (Gumbel-max draws from the same "
            "distribution)",
            measured="sampling kernels 42 us per step down to 12; with skinny-down 1.567-1.579 "
            "ms per step against 1.646-1.647"),
)
BY_NAME = {feature.name: feature for feature in FEATURES}

# removed features: name -> why (the figures are docs/performance.md's) and what to use instead
REMOVED: dict[str, tuple[str, str]] = {
    "sdpa": ("superseded by decode-attn's kernel", "decode-attn"),
    "window": ("superseded by decode-attn, which reads only each row's filled slots in one "
               "graph", "decode-attn"),
    "decode-attn-split": ("slower: 26.5k tok/s against 29.8k", "decode-attn"),
    "two-streams": ("slower: 30.5k tok/s against 32.2k", "one stream (the default)"),
    "four-streams": ("slower: 25.8k tok/s against 32.2k",
                     "one stream (the default)"),
    "attn-rope": ("slower: 31.7k tok/s against 33.5k", "folded-norms"),
    "pdl": ("no gain: 35.1k and 35.0k tok/s against 35.3k and 34.8k",
            "folded-norms"),
    "skinny-gemm": ("slower than cuBLAS for the whole step: 27.5k tok/s against "
                    "32.1k", "skinny-down (its kernel on the down projection only)"),
}


@dataclass(frozen=True)
class DecodeOptions:
    """Which decoder variant runs: one field per FEATURES row; all off is the reference path.
    Implied features are turned on here, and what a feature needs is checked (ValueError)."""

    fused: bool = False
    packed: bool = False
    decode_attn: bool = False
    graph_sampling: bool = False
    fused_sampling: bool = False
    fused_prefill: bool = False
    compiled: bool = False
    folded_norms: bool = False
    skinny_down: bool = False
    cdf_sampling: bool = False

    def __post_init__(self) -> None:
        implied = True
        while implied:  # until nothing more is implied (folded-norms -> compiled -> fused)
            implied = False
            for feature in self.features:
                for name in feature.implies:
                    if not getattr(self, BY_NAME[name].field):
                        object.__setattr__(self, BY_NAME[name].field, True)
                        implied = True
        for feature in FEATURES:
            missing = [need for need in feature.needs if not getattr(self, BY_NAME[need].field)]
            if getattr(self, feature.field) and missing:
                raise ValueError(f"'{feature.name}' needs {' and '.join(map(repr, missing))}: "
                                 f"name it too")

    @property
    def layers_fused(self) -> bool:
        """Whether the layers run the fused code (every layer feature implies `fused`)."""
        return self.fused

    @property
    def features(self) -> list[Feature]:
        return [feature for feature in FEATURES if getattr(self, feature.field)]

    @property
    def name(self) -> str:
        """The '+'-joined features in table order, those implied by another left out."""
        on = self.features
        implied = {name for feature in on for name in feature.implies}
        return "+".join(f.name for f in on if f.name not in implied) or "ref"


REFERENCE = DecodeOptions()
# the variant used when `options` is not passed: the reference path (tests, CPU callers)
DEFAULT_VARIANT = "ref"
# what the hf backend decodes with on CUDA when PPODECK_DECODE is unset: the table's defaults
BACKEND_VARIANT = DecodeOptions(**{f.field: True for f in FEATURES if f.default}).name


def parse_variant(name: str) -> DecodeOptions:
    """'ref' or a '+'-joined subset of FEATURES -> DecodeOptions (ValueError otherwise: an
    unknown name, a removed one with why and what instead, a feature without what it needs)."""
    text = name.strip().lower()
    if text in ("", "ref"):
        return REFERENCE
    parts = [p.strip() for p in text.split("+")]
    removed = [p for p in parts if p in REMOVED]
    if removed:
        raise ValueError("; ".join(f"'{p}' was removed ({REMOVED[p][0]}): use {REMOVED[p][1]}"
                                   for p in removed))
    unknown = [p for p in parts if p not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown decoder feature(s) {unknown}: use 'ref' or a '+'-joined "
                         f"subset of {', '.join(BY_NAME)}")
    return DecodeOptions(**{BY_NAME[p].field: True for p in parts})


def default_options() -> DecodeOptions:
    return parse_variant(DEFAULT_VARIANT)


def option_fields() -> list[str]:
    """DecodeOptions' field names (the table test checks each has a row)."""
    return [f.name for f in fields(DecodeOptions)]
