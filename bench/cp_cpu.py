"""CPU cost of context parallelism: one train step at CP=2 (2 gloo ranks) against CP=1 (1 rank).

The tiny-cpu preset's model and batch sizes, samples of random tokens with the preset's prompt
and response lengths (or --response-len). Each configuration trains the critic and the actor on
the same rollouts (one warm-up rollout, then --rollouts timed); the figure is the workers' own
per-optimizer-step time (perf/critic_step_time, perf/actor_step_time: forward, backward and
optimizer of one global batch) on the logging rank, which waits for the other CP rank in the
step's collectives, median over steps.
The losses of both configurations are printed too: they must agree (the engine's CP is exact).

On this machine the CP ranks share its cores with each other (and with anything else running),
so the ratio is the cost of the split on CPU (the K/V all-gather, its reduce-scatter, the row
padding), not a GPU figure.

Usage: .venv/bin/python bench/cp_cpu.py [--rollouts 3] [--response-len 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from ppodeck.engine.config.resolve import resolve  # noqa: E402
from ppodeck.engine.presets import load_preset, resolve_preset  # noqa: E402
from ppodeck.engine.rollout.types import RolloutBatch  # noqa: E402
from tests.train.worker_harness import all_values, run_ranks  # noqa: E402

ROLES = ("critic", "actor")


def preset_args(cp: int, world: int) -> dict[str, Any]:
    config = resolve_preset(load_preset("tiny-cpu")).with_values(
        context_parallel_size=cp, actor_num_gpus_per_node=world, num_gpus_per_node=world,
        model_init="random")
    return resolve(config, os.environ)


def make_batch(args: dict[str, Any], response_len: int, seed: int) -> RolloutBatch:
    """rollout_batch_size x n_samples_per_prompt samples: prompts of 1-8 tokens, responses of
    response_len/2 .. response_len tokens (lengths mostly not a multiple of 2*CP)."""
    gen = torch.Generator().manual_seed(seed)
    count = args["rollout_batch_size"] * args["n_samples_per_prompt"]
    vocab = args["vocab_size"]
    tokens, prompts, responses = [], [], []
    for _ in range(count):
        prompt = int(torch.randint(1, 9, (1,), generator=gen))
        response = int(torch.randint(response_len // 2, response_len + 1, (1,), generator=gen))
        tokens.append(torch.randint(0, vocab, (prompt + response,), generator=gen).tolist())
        prompts.append(prompt)
        responses.append(response)
    return RolloutBatch(tokens=tokens, prompt_lengths=prompts, response_lengths=responses,
                        loss_masks=[[1] * n for n in responses],
                        rewards=[float(i % 2) for i in range(count)],
                        truncated=[False] * count, rollout_log_probs=None,
                        sample_indices=list(range(count)))


def body(rank: int, world: int, ports: list[int], cp: int, rollouts: int,
         response_len: int) -> dict:
    from ppodeck.engine.train.worker import train_worker

    args = preset_args(cp, world)
    batches = [make_batch(args, response_len, seed) for seed in range(rollouts + 1)]
    out: dict[str, Any] = {}
    critic = train_worker("critic", rank, world, "127.0.0.1", ports[0], args)
    critic.init()
    critic_runs = [critic.train_critic(i, b) for i, b in enumerate(batches)]
    values = [all_values(r["values"]) for r in critic_runs]
    critic.shutdown()
    actor = train_worker("actor", rank, world, "127.0.0.1", ports[1], args)
    actor.init()
    actor_runs = [actor.train_actor(i, b, values[i]) for i, b in enumerate(batches)]
    actor.shutdown()
    for role, runs in (("critic", critic_runs), ("actor", actor_runs)):
        # the logging rank's metrics (empty elsewhere); the first rollout warms up
        metrics = [m for r in runs for m in r["step_metrics"]]
        timed = [m for r in runs[1:] for m in r["step_metrics"]]
        out[role] = {"seconds": [m[f"perf/{role}_step_time"] for m in timed],
                     "metrics": metrics}
    return out


def measure(cp: int, rollouts: int, response_len: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        return run_ranks(cp, body, Path(tmp), cp, rollouts, response_len)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=3)
    parser.add_argument("--response-len", type=int, default=None,
                        help="longest response (default: the preset's rollout-max-response-len)")
    opts = parser.parse_args()
    response_len = opts.response_len or preset_args(1, 1)["rollout_max_response_len"]
    results = {cp: measure(cp, opts.rollouts, response_len) for cp in (1, 2)}
    print(f"tiny-cpu, responses up to {response_len} tokens, {opts.rollouts} timed rollouts, "
          f"torch threads per rank: cores / ranks")
    print(f"{'per optimizer step':<22}{'CP=1 (1 rank)':>16}{'CP=2 (2 ranks)':>16}{'ratio':>8}")
    for role in ROLES:
        one = statistics.median(results[1][0][role]["seconds"])
        two = statistics.median(results[2][0][role]["seconds"])
        print(f"{role + ' step (s)':<22}{one:>16.4f}{two:>16.4f}{two / one:>8.2f}")
    for role, key in (("critic", "train/critic-value_loss"), ("actor", "train/pg_loss")):
        a = [m[key] for m in results[1][0][role]["metrics"]]
        b = [m[key] for m in results[2][0][role]["metrics"]]
        worst = max(abs(x - y) for x, y in zip(a, b, strict=True))
        print(f"{key}: {len(a)} steps, largest |CP2 - CP1| = {worst:.2e}")


if __name__ == "__main__":
    main()
