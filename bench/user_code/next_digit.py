"""A reward for a task PPO Deck's engine does not know: on the copy-digit prompts ("3 :"),
answer with the NEXT digit ((label + 1) mod 10), 4 times: "4 4 4 4" scores 1.0.

Written as a miles user would (`--custom-rm-path next_digit.score`, run from this directory or
with it on PYTHONPATH). When NEXT_DIGIT_CALLS_DIR is set, every call appends the sample's
index to a file there (one per process), so a test can see that every sample was scored.
"""

import asyncio
import os

TARGET_LEN = 4


async def score(args, sample, **kwargs):
    target = str((int(sample.label) + 1) % 10)
    tokens = sample.response.split()[:TARGET_LEN]
    _record(sample.index)
    return sum(token == target for token in tokens) / TARGET_LEN


async def slow_score(args, sample, **kwargs):
    """The same reward after a 50 ms wait, as a remote verifier takes (bench/reward_async.py)."""
    await asyncio.sleep(0.05)
    return await score(args, sample, **kwargs)


def _record(index):
    where = os.environ.get("NEXT_DIGIT_CALLS_DIR")
    if where:
        with open(os.path.join(where, f"calls-{os.getpid()}.txt"), "a") as out:
            out.write(f"{index}\n")
