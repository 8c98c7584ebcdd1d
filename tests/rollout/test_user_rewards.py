"""Reward functions users bring (miles' signatures), the remote RM client and DAPO filters."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ppodeck.engine.config.resolve import resolve_values
from ppodeck.engine.rollout.filters import (
    DropCounter,
    DynamicFilterOutput,
    FilterError,
    call_filter,
    check_no_aborted,
    check_reward_nonzero_std,
)
from ppodeck.engine.rollout.remote_rm import RemoteRewardError
from ppodeck.engine.rollout.user_rewards import (
    RewardError,
    RewardScorer,
    SampleStatus,
    UserCodeError,
    UserSample,
    load_user_function,
    post_process,
)


def args(**overrides: Any) -> dict[str, Any]:  # noqa: ANN401
    return resolve_values({"rollout_batch_size": 2, "n_samples_per_prompt": 2,
                           "global_batch_size": 4, **overrides}, os.environ)


def samples(count: int, n: int = 2, label: str = "3") -> list[UserSample]:
    return [UserSample(group_index=i // n, index=i, prompt=f"p{i // n}", tokens=[1, 2, 3],
                       response=f"r{i}", response_length=1, label=label,
                       metadata={"k": i}) for i in range(count)]


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Write `name.py` with `source` in a launch directory the engine finds (PPODECK_CODE_DIR)."""
    monkeypatch.setenv("PPODECK_CODE_DIR", str(tmp_path))
    names: list[str] = []

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(source)
        names.append(name)
        return name

    yield write
    for name in names:
        sys.modules.pop(name, None)
    if str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


CUSTOM = '''
import asyncio
CALLS = []

async def score(args, sample, **kwargs):
    await asyncio.sleep(0.05)
    CALLS.append((sample.index, sample.group_index, sample.prompt, sample.response,
                  sample.label, sample.metadata["k"], sample.status.value, args.rollout_batch_size))
    return float(sample.index)

def plain(args, sample):
    return {"acc": 1.0, "fmt": 0.5}

async def per_group(args, samples):
    return [s.index * 10 for s in samples]

async def group_boom(args, samples):
    raise KeyError("label")

async def group_short(args, samples):
    return [1.0]

async def group_text(args, samples):
    return [1.0, "x"]

async def boom(args, sample):
    if sample.index == 3:
        raise ZeroDivisionError("division by zero")
    return 1.0

async def text(args, sample):
    return "high"

def post(args, samples):
    raw = [s.reward for s in samples]
    return raw, [r - 1 for r in raw]
'''


def test_a_custom_async_function_is_called_once_per_sample_concurrently(user_module) -> None:
    user_module("rm_custom", CUSTOM)
    scorer = RewardScorer.from_args(args(custom_rm_path="rm_custom.score"))
    batch = samples(64)
    start = time.perf_counter()
    rewards = scorer.score(batch, 2)
    elapsed = time.perf_counter() - start
    module = sys.modules["rm_custom"]
    assert rewards == [float(i) for i in range(64)]
    assert sorted(c[0] for c in module.CALLS) == list(range(64))
    first = next(c for c in module.CALLS if c[0] == 5)
    assert first == (5, 2, "p2", "r5", "3", 5, "completed", 2)  # miles' fields and args
    assert elapsed < 1.0, f"64 calls of 50 ms took {elapsed:.2f} s: not concurrent"
    assert [s.reward for s in batch] == rewards


def test_a_plain_function_and_a_dict_reward_read_with_reward_key(user_module) -> None:
    user_module("rm_custom", CUSTOM)
    scorer = RewardScorer.from_args(args(custom_rm_path="rm_custom.plain", reward_key="fmt"))
    batch = samples(4)
    assert scorer.score(batch, 2) == [0.5] * 4
    assert batch[0].reward == {"acc": 1.0, "fmt": 0.5}  # kept as returned, as miles does
    without_key = RewardScorer.from_args(args(custom_rm_path="rm_custom.plain"))
    with pytest.raises(RewardError, match="returned a dict .*set --reward-key"):
        without_key.score(samples(2), 2)


def test_group_rm_calls_once_per_prompt_group(user_module) -> None:
    user_module("rm_custom", CUSTOM)
    scorer = RewardScorer.from_args(args(custom_rm_path="rm_custom.per_group", group_rm=True))
    assert scorer.score(samples(6), 2) == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]


def test_group_rm_failures_name_the_group_and_its_samples(user_module) -> None:
    user_module("rm_custom", CUSTOM)

    def scorer(fn: str) -> RewardScorer:
        return RewardScorer.from_args(args(custom_rm_path=f"rm_custom.{fn}", group_rm=True))

    with pytest.raises(RewardError, match=r"^custom reward function rm_custom.group_boom on "
                                          r"prompt group 0 \(samples 0-1\) raised KeyError"):
        scorer("group_boom").score(samples(2), 2)
    with pytest.raises(RewardError, match=r"returned \[1.0\] for prompt group 0: expected a "
                                          r"list of 2 rewards"):
        scorer("group_short").score(samples(2), 2)
    with pytest.raises(RewardError, match=r"rm_custom.group_text on sample 1 \(prompt group 0\) "
                                          r"returned 'x' \(str\)"):
        scorer("group_text").score(samples(2), 2)


def test_failures_name_the_function_the_sample_and_the_cause(user_module) -> None:
    user_module("rm_custom", CUSTOM)
    with pytest.raises(RewardError) as err:
        RewardScorer.from_args(args(custom_rm_path="rm_custom.boom")).score(samples(8), 2)
    message = str(err.value)
    assert message == ("custom reward function rm_custom.boom on sample 3 raised "
                       "ZeroDivisionError: division by zero")
    with pytest.raises(RewardError, match=r"rm_custom.text on sample 0 returned 'high' \(str\)"
                                          r": expected a number"):
        RewardScorer.from_args(args(custom_rm_path="rm_custom.text")).score(samples(2), 2)


def test_an_unimportable_module_or_missing_function_is_named(user_module) -> None:
    user_module("rm_broken", "import not_a_module_anywhere\n")
    with pytest.raises(UserCodeError, match=r"--custom-rm-path rm_broken.score: cannot import "
                                            r"rm_broken: ModuleNotFoundError"):
        load_user_function("rm_broken.score", "--custom-rm-path")
    user_module("rm_custom", CUSTOM)
    with pytest.raises(UserCodeError, match="has no 'nope'"):
        load_user_function("rm_custom.nope", "--custom-rm-path")
    with pytest.raises(UserCodeError, match="cannot import rm_absent"):
        load_user_function("rm_absent.score", "--custom-rm-path")


def test_custom_reward_post_process_as_miles_calls_it(user_module) -> None:
    user_module("rm_custom", CUSTOM)
    a = args(custom_reward_post_process_path="rm_custom.post")
    batch = samples(4)
    for i, s in enumerate(batch):
        s.reward = float(i)
    fn = load_user_function(a["custom_reward_post_process_path"], "--x")
    assert post_process(fn, a, batch) == ([0.0, 1.0, 2.0, 3.0], [-1.0, 0.0, 1.0, 2.0])
    with pytest.raises(RewardError, match="raw_rewards .*expected 3 numbers"):
        post_process(lambda _a, s: ([1.0] * 2, [1.0] * 2), a, batch[:3])
    with pytest.raises(RewardError, match=r"expected \(raw_rewards, rewards\)"):
        post_process(lambda _a, s: [1.0] * 3, a, batch[:3])


def test_rule_rewards_keep_working_through_the_scorer() -> None:
    scorer = RewardScorer.from_args(args(rm_type="copy-digit"))
    batch = samples(2, label="7")
    batch[0].response, batch[1].response = "7 7 7 7", "7 1"
    batch[0].metadata = batch[1].metadata = {"target_len": 4}
    assert scorer.score(batch, 2) == [1.0, 0.25]


# --------------------------------------------------------------------------- filters


def _scored(rewards: list[float]) -> list[UserSample]:
    group = samples(len(rewards), n=len(rewards))
    for s, r in zip(group, rewards, strict=True):
        s.reward = r
    return group


def test_the_built_in_filters_equal_miles() -> None:
    a = args()
    ns = __import__("argparse").Namespace(**a)
    assert check_reward_nonzero_std(ns, _scored([1.0, 0.0])).keep
    out = check_reward_nonzero_std(ns, _scored([1.0, 1.0]))
    assert out == DynamicFilterOutput(False, "zero_std_1.0")
    assert not check_reward_nonzero_std(ns, _scored([0.5])).keep  # one sample: no std
    group = _scored([1.0, 0.0])
    assert check_no_aborted(ns, group).keep
    group[1].status = SampleStatus.ABORTED
    assert check_no_aborted(ns, group) == DynamicFilterOutput(False, "group_has_aborted")


def test_a_filter_may_answer_a_bool_and_must_answer_something() -> None:
    group = _scored([1.0, 0.0])
    assert call_filter(lambda a, s: False, "f.x", None, group) == DynamicFilterOutput(False)
    with pytest.raises(FilterError, match=r"f.x on prompt group 0 returned 'yes'"):
        call_filter(lambda a, s: "yes", "f.x", None, group)
    with pytest.raises(FilterError, match="f.x on prompt group 0 raised KeyError"):
        call_filter(lambda a, s: {}["k"], "f.x", None, group)


def test_drops_are_counted_with_miles_metric_names() -> None:
    drops = DropCounter()
    for out in (DynamicFilterOutput(True), DynamicFilterOutput(False, "zero_std_1.0"),
                DynamicFilterOutput(False, "zero_std_1.0"), DynamicFilterOutput(False)):
        drops.record(out)
    assert drops.metrics() == {"rollout/dynamic_filter/drop_zero_std_1.0": 2.0,
                               "rollout/dynamic_filter/dropped_groups": 3.0,
                               "rollout/dynamic_filter/sampled_groups": 4.0}


# --------------------------------------------------------------------------- remote RM


class RewardServer:
    """A local reward server on a free port: answers len(response) / 10, or the status codes
    queued in `fail_with` first; records every request body."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.fail_with: list[int] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.bodies.append(body)
                    status = server.fail_with.pop(0) if server.fail_with else 200
                reply = json.dumps(len(body["response"]) / 10 if status == 200
                                   else {"error": "busy"}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *a: Any) -> None:  # noqa: ANN401
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/reward"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> RewardServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:  # noqa: ANN401
        self.httpd.shutdown()
        self.httpd.server_close()


def test_remote_rm_posts_every_sample_as_miles_does() -> None:
    with RewardServer() as server:
        scorer = RewardScorer.from_args(args(rm_type="remote_rm", rm_url=server.url))
        batch = samples(16)
        rewards = scorer.score(batch, 2)
    assert rewards == [len(s.response) / 10 for s in batch]
    assert sorted(b["response"] for b in server.bodies) == sorted(s.response for s in batch)
    assert server.bodies[0].keys() == {"prompt", "response", "label"}


def test_remote_rm_retries_then_fails_naming_url_and_status() -> None:
    with RewardServer() as server:
        scorer = RewardScorer.from_args(args(rm_type="remote_rm", rm_url=server.url))
        scorer.remote.backoff_s = 0.01
        server.fail_with = [503, 503]  # two busy answers, then it works
        assert scorer.score(samples(1), 1) == [0.2]
        assert len(server.bodies) == 3
        server.fail_with = [503] * 10
        with pytest.raises(RemoteRewardError) as err:
            scorer.score(samples(1), 1)
        server.fail_with = [400]
        with pytest.raises(RemoteRewardError, match=r"answered HTTP 400 \(Bad Request\)"):
            scorer.score(samples(1), 1)
    assert str(err.value).startswith(f"remote reward model {server.url} failed for sample 0 "
                                     "after 4 attempts: HTTP 503 (Service Unavailable)")


def test_remote_rm_unreachable_fails_with_the_url() -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    scorer = RewardScorer.from_args(args(rm_type="remote_rm",
                                         rm_url=f"http://127.0.0.1:{port}/r"))
    scorer.remote.backoff_s = 0.01
    with pytest.raises(RemoteRewardError, match=rf"127.0.0.1:{port}/r failed for sample 0 "
                                                r"after 4 attempts: ClientConnectorError"):
        scorer.score(samples(1), 1)
