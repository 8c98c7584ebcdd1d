"""The model layer, below the trainer (engine.train) and the rollout (engine.rollout): what both
sides share about one network without either importing the other.

- shape: the architecture as the Megatron flags give it (ModelShape), torch-free;
- convert: HF <-> Megatron-core weight names and layouts, and the HF config of a shape;
- weight_transfer, ipc_sync: the actor -> rollout weight push (one flat host buffer through
  Ray, or a CUDA IPC handle of one device buffer);
- offload, pinned: moving a process's tensors to page-locked host memory and back (the
  trainer's --offload-train and the colocated hf rollout's weights both use it);
- compile_budget: torch.compile's per-function graph budget (the trainer's fused ops and the
  rollout's compiled decoder).

The rule (tests/contracts/test_layers.py): engine.model imports neither engine.train nor
engine.rollout, lazily or not; engine.train and engine.rollout import it, and engine.rollout
never imports engine.train. Heavy side: modules here may import torch (not shape); light
modules never import this package.
"""
