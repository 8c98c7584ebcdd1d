#!/usr/bin/env python3
"""How many graphs the compiled transformer layers take over a run's micro-batch shapes, and
why each recompile happened (a diagnosis tool for engine/train/layer_compile.py).

    PYTHONPATH=/tmp/site python3 bench/gpu_compile_check.py 2> recompiles.log   # on the H200
    .venv/bin/python bench/gpu_compile_check.py --smoke                          # CPU, tiny

For the Qwen3-0.6B actor (bench/gpu_bench.py's plan) it runs a train step and a no_grad
forward for each of a list of right-padded micro-batch shapes, as dynamic batching produces
them, and prints per shape the wall time and dynamo's running graph count. Dynamo's recompile
and graph-break reasons go to stderr. `--all-dynamic` compiles with dynamic=True instead of
marking the token dims, to compare.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import gpu_bench as gb  # noqa: E402
import torch  # noqa: E402

# (batch, padded length): full micro-batches, a short tail, a batch of one, long rows
SHAPES = [(30, 272), (27, 272), (4, 272), (30, 250), (1, 49), (16, 300), (8, 1024),
          (12, 700), (1, 272), (29, 265)]


def use_all_dynamic() -> None:
    from ppodeck.engine.train import layer_compile

    original = layer_compile.CompiledLayerCall.__init__

    def init(self, layer, state) -> None:  # noqa: ANN001
        original(self, layer, state)
        self.compiled = torch.compile(layer._call_impl, dynamic=True)

    layer_compile.CompiledLayerCall.__init__ = init
    layer_compile._mark_tokens_dynamic = lambda kwargs: None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--all-dynamic", action="store_true")
    ns = parser.parse_args()
    from torch._dynamo.utils import counters

    torch._logging.set_logs(recompiles=True, graph_breaks=True)
    if ns.all_dynamic:
        use_all_dynamic()
    plan = gb.Plan.make(ns.smoke)
    gb.init_megatron()
    ddp, optimizer, kinds = gb.build_trainable(plan, "actor", gb.DEFAULT_VARIANT)
    print(f"actor {gb.DEFAULT_VARIANT}: {kinds}; all_dynamic={ns.all_dynamic}", flush=True)
    shapes = [(max(1, b // 8), max(4, s // 16)) for b, s in SHAPES] if ns.smoke else SHAPES
    for batch, length in shapes:
        ids = torch.randint(0, plan.shape.vocab_size, (batch, length), device=plan.device)
        positions = torch.arange(length, device=plan.device).expand_as(ids)
        gb.sync(plan.device)
        start = time.perf_counter()
        gb.train_step(ddp, optimizer, "actor", ids, positions)
        with torch.no_grad():
            ddp(ids, positions, None)
        gb.sync(plan.device)
        print(f"{batch:3d} x {length:5d}: {time.perf_counter() - start:7.2f} s, graphs so far "
              f"{counters['stats']['unique_graphs']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
