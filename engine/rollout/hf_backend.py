"""The `hf` rollout backend: transformers generation for CPU and small GPU runs.

The model is built from `hf_config(shape, arch)` (random weights, or uninitialized zeros when
the actor's weights are pushed before the first rollout) and receives the actor's
weights through the same Megatron -> HF conversion that feeds SGLang. Sampling log-probs are
log-softmax(logits / temperature) of the chosen tokens: the same quantity the actor computes
(as miles' logit_processors.py), before any top-p/top-k filtering, so rollout and training
log-probs are comparable.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from ..host.clock import PartClock
from ..model.convert import Arch, hf_config
from ..model.offload import StorageOffloader
from ..model.shape import ModelShape
from .types import GenOut


class HFGenerator:
    """A transformers causal LM that samples batches of responses."""

    def __init__(self, shape: ModelShape, arch: Arch, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32, init_seed: int = 0,
                 init_weights: bool = True, max_context_len: int | None = None) -> None:
        """`init_weights=False` when the actor's weights are pushed before the first rollout:
        the parameters are then made as zeros on the device, never randomly initialized
        (a seeded init on one host core takes tens of seconds, all of it overwritten).
        `max_context_len` (--rollout-max-context-len) bounds prompt + response per row."""
        from transformers import AutoModelForCausalLM

        clock = PartClock()
        self.shape, self.arch = shape, arch
        self.device = torch.device(device)
        # no token ids baked in (LlamaConfig says eos=2): generate() gets them per call,
        # and an eos_token_id=None call must not stop at some default id
        config = hf_config(shape, arch, bos_token_id=None, eos_token_id=None, pad_token_id=None)
        model_class(config)  # transformers imports the model's module lazily: its own part
        clock.done("model import")
        if init_weights:
            # drawn where the model lives: seeded, so the placeholder weights are reproducible
            with torch.device(self.device), seeded(init_seed, self.device):
                model = AutoModelForCausalLM.from_config(config, dtype=dtype)
            clock.done("model build + weights init")
        else:
            with parameters_on_meta():
                model = AutoModelForCausalLM.from_config(config, dtype=dtype)
            clock.done("model build")
        self.model = materialize(model, self.device).eval()
        clock.done("to device")
        self.weights_initialized = init_weights
        self.max_context_len = max_context_len
        self.tied = bool(config.tie_word_embeddings)
        self._storage_offloader: StorageOffloader | None = None  # made at the first offload
        self.notes: list[str] = []  # shown by the rollout manager at init
        self.overrides: list[str] = []  # the same, as warnings: what replaces what was asked
        self.decode_options = self._decode_options()
        self._note_decoder_fallback()
        clock.done("decoder options")
        self.parts = clock.parts  # the rollout_start step's parts (engine/driver/roles.py)

    # ---- weights ------------------------------------------------------------------------
    def load_weights(self, hf_state_dict: Mapping[str, torch.Tensor]) -> int:
        """Copy an HF-named state dict in (strict); returns the bytes received."""
        expected = set(self.model.state_dict())
        # a tied model's lm_head is the embedding itself: files and mcore_to_hf omit it
        missing = sorted(k for k in expected - set(hf_state_dict)
                         if not (self.tied and k == "lm_head.weight"))
        unexpected = sorted(set(hf_state_dict) - expected)
        if missing or unexpected:  # checked first so a bad push leaves the weights untouched
            raise KeyError(f"rollout weights do not match the {self.arch} model: missing "
                           f"{missing[:3]} ({len(missing)}), unexpected {unexpected[:3]} "
                           f"({len(unexpected)})")
        self.model.load_state_dict(dict(hf_state_dict), strict=False)
        if self.tied:
            self.model.tie_weights()
        return sum(t.numel() * t.element_size() for t in hf_state_dict.values())

    # ---- generation ---------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, prompt_ids: Sequence[Sequence[int]], *, n_samples: int = 1,
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = -1,
                 max_new_tokens: int, eos_token_id: int | None, pad_token_id: int,
                 seed: int) -> list[GenOut]:
        """n_samples responses per prompt, prompt-major (all samples of prompt 0 first)."""
        if not prompt_ids:
            return []
        rows = [list(p) for p in prompt_ids for _ in range(n_samples)]
        limits = row_limits(rows, max_new_tokens, self.max_context_len)
        max_new_tokens = max(limits)  # no row decodes past its own limit: cut below
        if self._fast_path():
            from .decoder.generate import fast_generate

            tokens, log_probs = fast_generate(
                self.model, rows, temperature=temperature, top_p=top_p, top_k=top_k,
                max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                pad_token_id=pad_token_id, seed=seed, options=self.decode_options)
            return cut_at_eos(tokens, log_probs, eos_token_id, limits)
        input_ids, attention_mask = left_pad(rows, pad_token_id, self.device)
        recorder = LogProbRecorder(temperature)
        with seeded(seed, self.device):
            sequences = self.model.generate(
                input_ids=input_ids, attention_mask=attention_mask,
                generation_config=generation_config(temperature > 0, max_new_tokens,
                                                    eos_token_id, pad_token_id),
                logits_processor=sampling_processors(recorder, temperature, top_p, top_k))
        new_tokens = sequences[:, input_ids.shape[1]:]
        log_probs = recorder.finish(new_tokens)
        return cut_at_eos(new_tokens.tolist(), log_probs.tolist(), eos_token_id, limits)

    def compiles_at_first_use(self) -> bool:
        """The CUDA fast decoder builds (and with `compiled`, compiles) its kernels at its
        first generate of each shape: worth a warm-up where it is hidden (manager.init)."""
        return self._fast_path()

    def _fast_path(self) -> bool:
        """On CUDA: static KV cache + CUDA-graph decode (fast_generate); PPODECK_FAST_GENERATE=0
        falls back to transformers.generate."""
        if self.device.type != "cuda" or os.environ.get("PPODECK_FAST_GENERATE") == "0":
            return False
        from .decoder.generate import can_use

        return can_use(self.model)[0]

    def _note_decoder_fallback(self) -> None:
        """On CUDA a model the fast decoder cannot run (Qwen2's q/k/v biases, say) is sampled
        by transformers' generate: said, never silent."""
        if self.device.type != "cuda" or os.environ.get("PPODECK_FAST_GENERATE") == "0":
            return
        from .decoder.generate import can_use

        ok, why = can_use(self.model)
        if not ok:
            self.overrides.append(f"hf rollout: the CUDA fast decoder cannot run this model "
                                  f"({why}); transformers' generate samples instead (slower)")

    def _decode_options(self) -> Any:  # noqa: ANN401
        """The fast decoder's variant (PPODECK_DECODE=<name>), noted whenever it is set."""
        from .decoder.generate import VARIANT_ENV, options_from_env

        options, note = options_from_env()
        fast = self._fast_path()
        if note is not None and (fast or VARIANT_ENV in os.environ):  # the default: only on CUDA
            where = "" if fast else " (not used: the fast decoder runs on CUDA only)"
            self.notes.append(note + where)
        return options

    # ---- memory -------------------------------------------------------------------------
    def offload(self) -> dict[str, Any]:
        """Weights to pinned host memory and the decoder's KV cache and CUDA graphs freed, so
        training gets the GPU; a reported no-op on CPU."""
        if self.device.type == "cpu":
            return _cpu_noop()
        from .decoder.generate import release_decoders

        release_decoders()
        return self._offloader().offload()

    def onload(self) -> dict[str, Any]:
        if self.device.type == "cpu":
            return _cpu_noop()
        return self._offloader().onload()

    def _offloader(self) -> StorageOffloader:
        """The train offload's storage mover over the model's weights: pinned buffers made once,
        ~50 GB/s against ~2 GB/s for `model.to("cpu")` into pageable memory."""
        if self._storage_offloader is None:
            self._storage_offloader = model_offloader(self.model, self.device.type)
        return self._storage_offloader

    def shutdown(self) -> None:
        self.model = None  # type: ignore[assignment]


def _cpu_noop() -> dict[str, Any]:
    # a CPU-only run has nothing to release: say so instead of pretending
    return {"noop": True, "bytes": 0, "seconds": 0.0, "gbps": None, "where": "cpu"}


def model_class(config: Any) -> type:  # noqa: ANN401 - a transformers PretrainedConfig
    """The causal-LM class from_config will build (importing its module, ~1-5 s)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    return MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]


@contextlib.contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Modules built inside get their parameters on the meta device: no memory, and their
    init (nn.Linear's kaiming, HF's normal_) does nothing. Buffers stay real, so values
    computed at construction (RoPE's inv_freq) are the same as in a normal build."""
    register = torch.nn.Module.register_parameter

    def register_on_meta(module: torch.nn.Module, name: str,
                         param: torch.nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None and not param.is_meta:
            module._parameters[name] = torch.nn.Parameter(
                param.to("meta"), requires_grad=param.requires_grad)

    torch.nn.Module.register_parameter = register_on_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register  # type: ignore[method-assign]


def materialize(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """Meta parameters become zeros on `device` (a shared one, e.g. tied embeddings, stays
    shared); the rest of the model moves there. Zeros, not torch.empty: the model is then
    well defined (uniform next-token distribution) should anything run before the push."""
    made: dict[int, torch.nn.Parameter] = {}
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is None or not param.is_meta:
                continue
            if id(param) not in made:
                made[id(param)] = torch.nn.Parameter(
                    torch.zeros(param.shape, dtype=param.dtype, device=device),
                    requires_grad=param.requires_grad)
            module._parameters[name] = made[id(param)]
    return model.to(device)


def model_offloader(model: torch.nn.Module, device_type: str) -> StorageOffloader:
    """A StorageOffloader over every parameter and buffer (tied weights counted once). Resizing
    storages keeps the Parameter objects, so load_weights and the HF modules need no rebinding."""
    tensors = [*model.parameters(), *model.buffers()]
    return StorageOffloader.for_tensors(keep=tensors, drop=[], device_type=device_type)


def left_pad(rows: Sequence[Sequence[int]], pad_token_id: int,
             device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoder-only batching: pad on the left so every row's last token is its real last."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row):] = 1
    return ids.to(device), mask.to(device)


def generation_config(sample: bool, max_new_tokens: int, eos_token_id: int | None,
                      pad_token_id: int):  # noqa: ANN201
    """Sampling on, but no built-in warpers: sampling_processors() orders them itself.

    The neutral values are explicit because an unset top_k means HF's default of 50.
    """
    from transformers import GenerationConfig

    neutral = {"temperature": 1.0, "top_p": 1.0, "top_k": 0} if sample else {}
    return GenerationConfig(do_sample=sample, max_new_tokens=max_new_tokens,
                            eos_token_id=eos_token_id, pad_token_id=pad_token_id,
                            use_cache=True, **neutral)


def sampling_processors(recorder: LogProbRecorder, temperature: float, top_p: float,
                        top_k: int):  # noqa: ANN201
    """[recorder, temperature, top-k, top-p]: HF's own warper order, the recorder first so it
    sees the raw logits (this list's order is ours, not an internal of `generate`)."""
    from transformers import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    processors = LogitsProcessorList([recorder])
    if temperature > 0:
        if temperature != 1.0:
            processors.append(TemperatureLogitsWarper(temperature))
        if top_k is not None and top_k > 0:  # miles: -1 = off
            processors.append(TopKLogitsWarper(top_k))
        if top_p is not None and top_p < 1.0:
            processors.append(TopPLogitsWarper(top_p))
    return processors


class LogProbRecorder:
    """A logits processor that keeps log pi(chosen token) per step without storing [T, B, V].

    Called with the raw logits of step t; the token chosen at step t shows up as the last
    input id at step t+1 (and in the final sequences for the last step). Like the actor's
    logit processor, logits are divided by the temperature only when it is neither 0 nor 1.
    """

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.pending: torch.Tensor | None = None  # [B, V] log-probs of the current step
        self.chosen: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._take(input_ids[:, -1])
        logits = scores.float()
        if self.temperature > 0 and self.temperature != 1.0:
            logits = logits / self.temperature
        self.pending = torch.log_softmax(logits, dim=-1)
        return scores

    def _take(self, tokens: torch.Tensor) -> None:
        if self.pending is not None:
            self.chosen.append(self.pending.gather(-1, tokens.unsqueeze(-1)).squeeze(-1))
            self.pending = None

    def finish(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """[B, T] log-probs of `new_tokens` (the generated part of the sequences)."""
        if new_tokens.shape[1]:
            self._take(new_tokens[:, -1])
        if len(self.chosen) != new_tokens.shape[1]:
            raise RuntimeError(f"recorded {len(self.chosen)} steps for "
                               f"{new_tokens.shape[1]} generated tokens")
        if not self.chosen:
            return torch.zeros(new_tokens.shape, dtype=torch.float32)
        return torch.stack(self.chosen, dim=1).cpu()


def row_limits(rows: Sequence[Sequence[int]], max_new_tokens: int,
               max_context_len: int | None) -> list[int]:
    """New tokens each row may take: --rollout-max-response-len, and prompt + response within
    --rollout-max-context-len (as SGLang's context length bounds it). A prompt that fills the
    context alone still gets one token (check() keeps prompts below the context)."""
    if not max_context_len:
        return [max_new_tokens] * len(rows)
    return [max(1, min(max_new_tokens, max_context_len - len(row))) for row in rows]


def cut_at_eos(tokens: list[list[int]], log_probs: list[list[float]], eos_token_id: int | None,
               limits: Sequence[int]) -> list[GenOut]:
    """Responses end after their first EOS (kept: a trainable token, like miles), or at their
    row's limit of new tokens (truncated)."""
    outs = []
    for row, lps, limit in zip(tokens, log_probs, limits, strict=True):
        row = row[:limit]
        end = row.index(eos_token_id) + 1 if eos_token_id in row else len(row)
        truncated = eos_token_id not in row[:end] and end >= limit
        outs.append(GenOut(response_ids=row[:end], log_probs=lps[:end], truncated=truncated))
    return outs


@contextlib.contextmanager
def seeded(seed: int, device: torch.device) -> Iterator[None]:
    """Seed sampling without disturbing the caller's global RNG streams."""
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield
