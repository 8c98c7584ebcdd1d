"""Evaluation rollouts (--eval-interval, --eval-prompt-data NAME PATH ...): no training on them.

As miles' eval_rollout_single_dataset: every prompt of each eval dataset is sampled
--n-samples-per-eval-prompt times with the eval sampling values (resolve() filled the
fallbacks to the rollout's: temperature, top-p, top-k, max response length), scored with the
same reward function as training, and reported as miles names it: `eval/<name>` (mean reward),
`eval/<name>-truncated_ratio`, `eval/<name>/response_len/{mean,median,max,min}`.
The data flags (--input-key, --label-key, --metadata-key, chat template) are the training ones.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .types import GenOut, Prompt

# eval draws its own reproducible sampling stream, apart from every training rollout's
EVAL_SEED_BASE = 7_777_777


@dataclass(frozen=True)
class EvalSet:
    name: str
    path: str
    prompts: list[Prompt]


def load_eval_sets(datasets: Sequence[tuple[str, str]], tokenizer: Any,  # noqa: ANN401
                   options: Any) -> list[EvalSet]:  # noqa: ANN401
    """Every (name, path) of --eval-prompt-data, tokenized like the training prompts."""
    from .data import build_prompts, load_records

    sets = []
    for name, path in datasets:
        try:
            prompts, _dropped = build_prompts(load_records(path), tokenizer, options)
        except (FileNotFoundError, KeyError, ValueError) as err:
            raise ValueError(f"--eval-prompt-data {name} {path}: {err}") from err
        sets.append(EvalSet(name, path, prompts))
    return sets


def eval_sampling(args: Mapping[str, Any]) -> dict[str, Any]:
    return {"temperature": float(args["eval_temperature"]), "top_p": float(args["eval_top_p"]),
            "top_k": int(args["eval_top_k"]),
            "max_new_tokens": int(args["eval_max_response_len"])}


def evaluate_set(eval_set: EvalSet, args: Mapping[str, Any], generate: Callable[..., list[GenOut]],
                 score: Callable[[Prompt, GenOut], float], rollout_id: int) -> dict[str, float]:
    """One dataset: generate in chunks of --rollout-batch-size prompts, score, summarize."""
    n = int(args["n_samples_per_eval_prompt"])
    chunk = int(args["rollout_batch_size"])
    sampling = eval_sampling(args)
    outs: list[GenOut] = []
    rewards: list[float] = []
    for start in range(0, len(eval_set.prompts), chunk):
        part = eval_set.prompts[start:start + chunk]
        seed = (EVAL_SEED_BASE + int(args["rollout_seed"])) * 1_000_003 + rollout_id * 997 + start
        got = generate([p.token_ids for p in part], n, seed=seed, **sampling)
        rewards += [score(p, out) for p, out in zip((p for p in part for _ in range(n)), got,
                                                    strict=True)]
        outs += got
    return eval_metrics(eval_set.name, outs, rewards)


def eval_metrics(name: str, outs: Sequence[GenOut], rewards: Sequence[float]) -> dict[str, float]:
    lengths = [len(o.response_ids) for o in outs]
    prefix = f"eval/{name}"
    return {
        prefix: statistics.fmean(rewards),
        f"{prefix}-truncated_ratio": sum(o.truncated for o in outs) / len(outs),
        f"{prefix}/response_len/mean": statistics.fmean(lengths),
        f"{prefix}/response_len/median": float(statistics.median(lengths)),
        f"{prefix}/response_len/max": float(max(lengths)),
        f"{prefix}/response_len/min": float(min(lengths)),
    }
