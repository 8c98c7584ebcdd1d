"""Rewards for a rollout's samples, as miles' `async_rm` / `batched_async_rm` compute them.

Which function scores a sample (miles' order): `--custom-rm-path` when set; else the rm type
(the sample's metadata "rm_type" before `--rm-type`): `remote_rm` posts to `--rm-url`
(engine/rollout/remote_rm.py), the others are the rule rewards of engine/rollout/rewards.py.

User functions keep miles' signatures:
- per sample  `async def fn(args, sample, **kwargs)` -> a number, or a dict read with --reward-key
- --group-rm  `async def fn(args, samples, **kwargs)` -> one value per sample of the prompt group
- --custom-reward-post-process-path  `fn(args, samples)` -> (raw_rewards, rewards), over the
  rollout's flat sample list, instead of the built-in normalization.
`args` is an argparse.Namespace of the resolved flags (attribute names are the dests, as miles'
args); `sample` is a `UserSample` (miles' Sample fields that reward code reads).

Concurrency: every sample (or group) of a rollout is scored at once with asyncio.gather, as
miles does, so 512 calls that each wait 50 ms take about 50 ms, not 25 s. miles awaits the
function, so it must be `async def` there; PPO Deck also takes a plain `def`, which then runs in
worker threads (up to 64 at once: concurrent for I/O, one at a time for pure-Python CPU work).

Errors fail the rollout at once: an import error, an exception, or a value that is not a number
raises RewardError naming the function, the sample index and the cause (one line: the driver
shows it as the run's failure).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import importlib
import inspect
import math
import sys
from argparse import Namespace
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, TypeVar

from ..config.code_paths import engine_path, search_path, split_dotted
from ..host.machine import environment

T = TypeVar("T")


class RewardError(RuntimeError):
    """A reward could not be computed; str() names the function, the sample and the cause."""


class UserCodeError(RuntimeError):
    """A function named by a flag could not be loaded; str() names the flag, path and cause."""


class SampleStatus(Enum):
    """miles' Sample.Status values."""

    PENDING = "pending"
    COMPLETED = "completed"
    TRUNCATED = "truncated"
    ABORTED = "aborted"
    FAILED = "failed"


@dataclass(eq=False)
class UserSample:
    """What reward code sees of a sample: miles' Sample fields, same names and meanings.

    group_index: the prompt's position in the run's prompt stream (miles: groups drawn so far);
    index: group_index * n_samples_per_prompt + k; tokens: prompt + response token ids;
    status: COMPLETED, or TRUNCATED when the response hit --rollout-max-response-len.
    """

    Status: ClassVar[type[SampleStatus]] = SampleStatus

    group_index: int
    index: int
    prompt: str
    tokens: list[int]
    response: str
    response_length: int
    label: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    status: SampleStatus = SampleStatus.COMPLETED
    rollout_log_probs: list[float] | None = None
    loss_mask: list[int] | None = None
    reward: Any = None  # what the reward function returned (a number or a dict)

    def get_reward_value(self, args: Any) -> Any:  # noqa: ANN401
        """miles: the reward itself, or reward[args.reward_key] when --reward-key is set."""
        key = getattr(args, "reward_key", None)
        return self.reward[key] if key else self.reward

    @property
    def effective_response_length(self) -> int:
        return sum(self.loss_mask) if self.loss_mask is not None else self.response_length


# --------------------------------------------------------------------------- loading


def load_user_function(path: str, flag: str) -> Callable[..., Any]:
    """The function at dotted `path`, imported as miles' load_function does; miles' built-in
    filters map to PPO Deck's equivalents. Raises UserCodeError naming `flag`."""
    target = engine_path(path)
    dotted = split_dotted(target)
    if dotted is None:
        raise UserCodeError(f"{flag} {path!r} is not a dotted Python path (module.function)")
    module_name, attr = dotted
    add_code_dir_to_path()
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - the user's module may raise anything at import
        raise UserCodeError(f"{flag} {path}: cannot import {module_name}: "
                            f"{type(err).__name__}: {err}") from err
    fn = getattr(module, attr, None)
    if fn is None:
        raise UserCodeError(f"{flag} {path}: module {module_name} ({module.__file__}) has no "
                            f"{attr!r}")
    if not callable(fn):
        raise UserCodeError(f"{flag} {path}: {attr} is a {type(fn).__name__}, not a function")
    return fn


def add_code_dir_to_path() -> None:
    """The launch directory goes at the END of sys.path: found after the libraries, so a local
    file named like one (random.py, ray/) cannot shadow it."""
    for entry in search_path(environment()):
        if entry not in sys.path:
            sys.path.append(entry)


def is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None))  # noqa: B004 - an object with an async __call__


SYNC_THREADS = 64  # plain-def reward functions run at most this many at once
_sync_pool: concurrent.futures.ThreadPoolExecutor | None = None


def sync_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The threads plain functions run in: asyncio's default pool has min(32, cores + 4),
    6 on 2 cores, which would make 512 blocking 50 ms calls take 4.4 s instead of 0.4 s."""
    global _sync_pool
    if _sync_pool is None:
        _sync_pool = concurrent.futures.ThreadPoolExecutor(SYNC_THREADS,
                                                           thread_name_prefix="reward")
    return _sync_pool


async def call_user(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
    """Await an async function; run a plain one in a worker thread (awaiting what it returns
    if that is awaitable)."""
    if is_async(fn):
        return await fn(*args, **kwargs)
    call = functools.partial(fn, *args, **kwargs)
    result = await asyncio.get_running_loop().run_in_executor(sync_pool(), call)
    return await result if inspect.isawaitable(result) else result


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """Run on a fresh event loop, in a helper thread when this thread already runs one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


# --------------------------------------------------------------------------- values


def reward_number(value: Any, key: str | None, what: str) -> float:  # noqa: ANN401
    """The float a returned reward trains on: a number, or value[--reward-key] for a dict."""
    picked = value
    if isinstance(value, Mapping):
        if not key:
            raise RewardError(f"{what} returned a dict ({_short(value)}): set --reward-key to "
                              "the key holding the reward")
        if key not in value:
            raise RewardError(f"{what} returned a dict without the --reward-key {key!r} "
                              f"({_short(value)})")
        picked = value[key]
    if isinstance(picked, bool) or not _is_number(picked):
        raise RewardError(f"{what} returned {_short(picked)} ({type(picked).__name__}): "
                          "expected a number" + ("" if key else
                                                 " (or a dict read with --reward-key)"))
    number = float(picked)
    if not math.isfinite(number):
        raise RewardError(f"{what} returned {number}: a reward must be finite")
    return number


def _is_number(value: Any) -> bool:  # noqa: ANN401
    if isinstance(value, int | float):
        return True
    item = getattr(value, "item", None)  # numpy / torch scalars
    return callable(item) and getattr(value, "ndim", None) == 0 and \
        isinstance(item(), int | float) and not isinstance(item(), bool)


def _short(value: Any) -> str:  # noqa: ANN401
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# --------------------------------------------------------------------------- scoring


@dataclass
class RewardScorer:
    """Scores a rollout's samples with the configured reward, all at once."""

    args: Mapping[str, Any]
    namespace: Namespace
    custom: Callable[..., Any] | None = None
    custom_name: str = ""
    remote: Any = None  # engine.rollout.remote_rm.RemoteRewardModel, when any rm type needs it

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> RewardScorer:
        """Loads the user function now, so a bad path fails at init, not mid-run."""
        path = args.get("custom_rm_path")
        custom = load_user_function(path, "--custom-rm-path") if path else None
        remote = None
        if args.get("rm_url"):
            from .remote_rm import RemoteRewardModel

            remote = RemoteRewardModel(args["rm_url"])
        return cls(args, Namespace(**args), custom, path or "", remote)

    @property
    def group(self) -> bool:
        return bool(self.args.get("group_rm"))

    def score(self, samples: Sequence[UserSample], group_size: int,
              rollout_id: int | None = None) -> list[float]:
        """Sets each sample's `reward` (as returned) and gives the floats to train on.
        `samples` are whole groups of `group_size`, in order. Progress (requests sent,
        answered, pending) goes to the run directory while it scores."""
        return run_coroutine(self.score_async(samples, group_size, rollout_id))

    async def score_async(self, samples: Sequence[UserSample], group_size: int,
                          rollout_id: int | None = None) -> list[float]:
        from .reward_tracker import RewardTracker, describe_reward

        if self.remote is not None:
            self.remote.open()
        tracker = RewardTracker(self.args.get("run_dir"), rollout_id,
                                describe_reward(self.args))
        try:
            async with tracker.writing():
                if self.group and self.custom is not None:
                    groups = [list(samples[i:i + group_size])
                              for i in range(0, len(samples), group_size)]
                    await asyncio.gather(*(tracker.track(self._score_group(g))
                                           for g in groups))
                else:
                    await asyncio.gather(*(tracker.track(self._score_sample(s))
                                           for s in samples))
        finally:
            if self.remote is not None:
                await self.remote.close()
        key = self.args.get("reward_key")
        return [reward_number(s.reward, key, self._what(s)) for s in samples]

    async def _score_sample(self, sample: UserSample) -> None:
        if self.custom is not None:
            sample.reward = await self._guarded(call_user(self.custom, self.namespace, sample),
                                                sample)
        else:
            sample.reward = await self._rule_or_remote(sample)
        reward_number(sample.reward, self.args.get("reward_key"), self._what(sample))

    async def _score_group(self, group: list[UserSample]) -> None:
        rewards = await self._guarded(call_user(self.custom, self.namespace, group), group[0])
        if hasattr(rewards, "__len__") and not isinstance(rewards, str | bytes | Mapping):
            rewards = list(rewards)  # a list, tuple, numpy array or tensor of rewards
        if not isinstance(rewards, list) or len(rewards) != len(group):
            raise RewardError(f"--custom-rm-path {self.custom_name} (--group-rm) returned "
                              f"{_short(rewards)} for prompt group {group[0].group_index}: "
                              f"expected a list of {len(group)} rewards, one per sample")
        for sample, reward in zip(group, rewards, strict=True):
            sample.reward = reward

    async def _rule_or_remote(self, sample: UserSample) -> Any:  # noqa: ANN401
        from ..config.reward_types import is_remote
        from .rewards import flag_rm_type, get_reward_fn, resolve_rm_type

        rm_type = resolve_rm_type(sample.metadata, flag_rm_type(self.args))
        if is_remote(rm_type):
            return await self.remote.score(sample)  # miles posts the full response
        fn = get_reward_fn(rm_type)
        try:
            return fn(sample.response, sample.label, sample.metadata)
        except Exception as err:  # noqa: BLE001 - named below, with the sample
            raise RewardError(f"--rm-type {rm_type} failed on sample {sample.index}: "
                              f"{type(err).__name__}: {err}") from err

    async def _guarded(self, call: Awaitable[Any], sample: UserSample) -> Any:  # noqa: ANN401
        """The call's result; what it raises becomes a RewardError naming the function and
        the sample (the group's samples under --group-rm, where one call scores them all)."""
        try:
            return await call
        except RewardError:
            raise
        except Exception as err:  # noqa: BLE001 - user code: any failure stops the run, named
            where = self._what(sample)
            if self.group and self.custom is not None:
                n = int(self.args["n_samples_per_prompt"])
                first = sample.index - sample.index % n
                where = (f"custom reward function {self.custom_name} on prompt group "
                         f"{sample.group_index} (samples {first}-{first + n - 1})")
            raise RewardError(f"{where} raised {type(err).__name__}: {err}") from err

    def _what(self, sample: UserSample) -> str:
        if self.custom is None:
            rm_type = self.args.get("rm_type") or "the rule reward"
            return f"--rm-type {rm_type} on sample {sample.index}"
        group = f" (prompt group {sample.group_index})" if self.group else ""
        return f"custom reward function {self.custom_name} on sample {sample.index}{group}"


# --------------------------------------------------------------------------- post-process


def load_post_process(args: Mapping[str, Any]) -> Callable[..., Any] | None:
    path = args.get("custom_reward_post_process_path")
    return load_user_function(path, "--custom-reward-post-process-path") if path else None


def post_process(fn: Callable[..., Any], args: Mapping[str, Any],
                 samples: list[UserSample]) -> tuple[list[float], list[float]]:
    """miles' custom reward post-process: fn(args, samples) -> (raw_rewards, rewards), both
    one number per sample; checked, so a bad answer fails here, named."""
    name = args["custom_reward_post_process_path"]
    what = f"--custom-reward-post-process-path {name}"
    try:
        out = fn(Namespace(**args), samples)
        if inspect.isawaitable(out):
            out = run_coroutine(_awaited(out))
    except Exception as err:  # noqa: BLE001 - user code: named, one line
        raise RewardError(f"{what} raised {type(err).__name__}: {err}") from err
    if not (isinstance(out, tuple | list) and len(out) == 2):
        raise RewardError(f"{what} returned {_short(out)}: expected (raw_rewards, rewards)")
    lists = []
    for name_of, values in zip(("raw_rewards", "rewards"), out, strict=True):
        values = list(values) if hasattr(values, "__iter__") else values  # tensors, arrays
        if not isinstance(values, list) or len(values) != len(samples):
            raise RewardError(f"{what} returned {name_of} {_short(values)}: expected "
                              f"{len(samples)} numbers, one per sample")
        lists.append([reward_number(v, None, f"{what} ({name_of}[{i}])")
                      for i, v in enumerate(values)])
    return lists[0], lists[1]


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


# --------------------------------------------------------------------------- preflight


def check_reward_setup(args: Mapping[str, Any]) -> None:
    """The driver's preflight, before Ray starts: the rm type exists, and every function the
    flags name imports (nothing is called)."""
    from ..config.reward_types import is_remote
    from .rewards import flag_rm_type, get_reward_fn

    rm_type = flag_rm_type(args)
    if args.get("custom_rm_path"):
        load_user_function(args["custom_rm_path"], "--custom-rm-path")
    elif rm_type and not is_remote(rm_type):
        get_reward_fn(rm_type)
    load_post_process(args)
    if args.get("dynamic_sampling_filter_path"):
        load_user_function(args["dynamic_sampling_filter_path"], "--dynamic-sampling-filter-path")
