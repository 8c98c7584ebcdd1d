"""Plain, picklable data passed between the rollout manager, the driver and the train workers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RolloutBatch:
    """One rollout's training data (the roles' interface); sample i is row i of every list."""

    tokens: list[list[int]]  # prompt + response token ids per sample
    prompt_lengths: list[int]
    response_lengths: list[int]
    loss_masks: list[list[int]]  # per response token, 1 = trainable
    rewards: list[float]  # raw scalar reward per sample (PPO: unnormalized)
    truncated: list[bool]
    rollout_log_probs: list[list[float]] | None  # from the generator, per response token
    sample_indices: list[int]  # global index within the rollout
    metrics: dict[str, float] = field(default_factory=dict)  # rollout/raw_reward, perf/...
    # per sample, for the run's samples files (engine/run/samples.py): prompt and response text,
    # label, raw_reward, group_index, status; the driver takes them off before training
    details: list[dict[str, Any]] | None = None

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class Prompt:
    """A dataset row ready for generation: its tokens plus what the reward needs."""

    index: int  # row in the (filtered) dataset, stable across epochs
    text: str  # the prompt as sent to the model (after the chat template, if any)
    token_ids: list[int]
    label: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Sample:
    """One of the n samples of a prompt (miles: group_index = which prompt of the rollout)."""

    prompt: Prompt
    group_index: int
    sample_index: int  # within the rollout, before trimming


@dataclass(frozen=True)
class GenOut:
    """What a rollout backend returns per sample; the response is cut after EOS."""

    response_ids: list[int]
    log_probs: list[float]  # log pi(token | prefix) of the temperature-scaled logits
    truncated: bool  # max_new_tokens reached without EOS
