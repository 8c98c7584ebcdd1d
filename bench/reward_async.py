"""The reward phase's time for one 512-sample rollout whose reward waits 50 ms per call.

Scored through the engine's RewardScorer (engine/rollout/user_rewards.py), as the rollout
manager scores a rollout:
  async def   --custom-rm-path next_digit.slow_score (asyncio.sleep(0.05), then the reward)
  plain def   the same with time.sleep(0.05), which PPO Deck runs in asyncio's worker threads
  remote_rm   --rm-type remote_rm against a local HTTP server that answers after 50 ms
Serially, 512 x 50 ms would be 25.6 s.

Usage: .venv/bin/python bench/reward_async.py [--samples 512] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["PPODECK_CODE_DIR"] = str(ROOT / "bench" / "user_code")

from ppodeck.engine.config.resolve import resolve_values  # noqa: E402
from ppodeck.engine.rollout.user_rewards import RewardScorer, UserSample  # noqa: E402

WAIT_S = 0.05
N_PER_PROMPT = 8


def samples(count: int) -> list[UserSample]:
    return [UserSample(group_index=i // N_PER_PROMPT, index=i, prompt="3 :", tokens=[1, 2],
                       response="4 4 4 4", response_length=4, label="3")
            for i in range(count)]


def plain_slow(args: Any, sample: UserSample) -> float:  # noqa: ANN401
    time.sleep(WAIT_S)
    return 1.0


class SlowServer:
    """Answers every POST with 1.0 after WAIT_S, on a free local port."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a real reward server

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(WAIT_S)
                body = json.dumps(1.0).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: Any) -> None:  # noqa: ANN401
                pass

        ThreadingHTTPServer.request_queue_size = 1024
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/reward"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def timed(scorer: RewardScorer, count: int, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        batch = samples(count)
        start = time.perf_counter()
        rewards = scorer.score(batch, N_PER_PROMPT)
        out.append(time.perf_counter() - start)
        assert len(rewards) == count
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=3)
    ns = parser.parse_args()
    base = {"rollout_batch_size": ns.samples // N_PER_PROMPT,
            "n_samples_per_prompt": N_PER_PROMPT, "global_batch_size": ns.samples}
    server = SlowServer()
    try:
        scorers = {
            "async def (--custom-rm-path)": RewardScorer.from_args(
                resolve_values({**base, "custom_rm_path": "next_digit.slow_score"}, os.environ)),
            "plain def (worker threads)": RewardScorer.from_args(
                resolve_values({**base, "custom_rm_path": "next_digit.score"}, os.environ)),
            "remote_rm (--rm-url)": RewardScorer.from_args(
                resolve_values({**base, "rm_type": "remote_rm", "rm_url": server.url}, os.environ)),
        }
        scorers["plain def (worker threads)"].custom = plain_slow
        print(f"reward phase for {ns.samples} samples, {WAIT_S * 1000:.0f} ms per call "
              f"(serial: {ns.samples * WAIT_S:.1f} s); median of {ns.repeat}")
        for name, scorer in scorers.items():
            seconds = timed(scorer, ns.samples, ns.repeat)
            print(f"  {name:<30} {statistics.median(seconds):6.3f} s "
                  f"(runs: {', '.join(f'{s:.3f}' for s in seconds)})")
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
