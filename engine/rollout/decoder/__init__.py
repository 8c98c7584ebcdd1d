"""The hf rollout backend's CUDA decoder (static KV cache, one CUDA graph per decode step).

Reading order for a newcomer:
  features.py        the decoder's features as ONE table (what each needs, default or opt-in,
                     the measurement that decided it), DecodeOptions, parse_variant and
                     BACKEND_VARIANT (the hf backend's CUDA default) derived from it;
  generate.py        the entry point `fast_generate`, `can_use`, `options_from_env`
                     (PPODECK_DECODE) and the generation loops;
  static_decoder.py  StaticDecoder: prefill, the decode step and its CUDA graph;
  layers.py          the layer maths it is built from, and `compiled`'s CompiledOrEager;
  sampling.py        sampling with transformers' semantics (host, in-graph, by kernel);
  state.py           the static buffers a captured step reads and writes;
  kernels/           the Triton kernels (kernels/__init__.py lists them), a sub-package so that
                     the modules above read without launch details.
Nothing is imported here: features.py stays torch-free for light modules.
"""
