"""The reward types, declared once: the rule rewards PPO Deck's rollout has, the remote reward
model, the `boxed_` prefix, and each synthetic task's own reward.

check() (engine/config/rules_user_code.py, rules_engine.py) and the rollout
(engine/rollout/rewards.py, manager.py, user_rewards.py) read them from here, so the rule
"a remote reward model needs --rm-url" and the rollout that posts to it agree on which types
are remote (`remote_rm` and `boxed_remote_rm` alike). PURE: imports nothing.
"""

from __future__ import annotations

BOXED_PREFIX = "boxed_"  # reduces the response to its boxed answer first
REMOTE_RM = "remote_rm"  # posts each sample to --rm-url
RULE_REWARDS = ("copy-digit", "deepscaler", "math")  # engine/rollout/rewards.py REWARDS
# a synthetic task's reward when --rm-type is not set; its samples carry no rm_type of their
# own, so a --rm-type the user sets reaches every sample
SYNTHETIC_REWARD = {"copy-digit": "copy-digit"}


def base_type(rm_type: str | None) -> str:
    """`boxed_math` -> `math`; "" for None."""
    return (rm_type or "").strip().removeprefix(BOXED_PREFIX)


def is_remote(rm_type: str | None) -> bool:
    """A type scored by the reward server at --rm-url (so it needs one)."""
    return base_type(rm_type) == REMOTE_RM


def default_rm_type(rm_type: str | None, synthetic_task: str | None) -> str | None:
    """The type a sample without an rm_type of its own gets: --rm-type, else the synthetic
    task's own reward."""
    return rm_type or SYNTHETIC_REWARD.get(synthetic_task or "")
