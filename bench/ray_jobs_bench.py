"""Ray Jobs figures on a two-node Ray cluster started here (127.0.0.1, 2 declared GPUs a node).

1. Submit -> first metric on the local screen: seconds from `ppodeck run tiny-cpu --submit`
   until the first `metrics` event is in the local events.jsonl, against `ppodeck run
   tiny-cpu --detach` (a private local Ray) until the same event.
2. Events lost when the log stream is cut mid-run and reconnected: the local follower is
   SIGKILLed while the job runs (its websocket dies with it) and started again; at the end the
   local events.jsonl is compared line by line with the one the job wrote on the cluster.
   Lost and duplicated must both be 0.
3. With --multinode: tiny-cpu with TP=2, DP=2 over both nodes against the one-rank run, the
   largest difference of any logged loss.
4. With --tests: the slow cluster tests (tiny-cpu TP=2 DP=2 over both nodes vs one rank; a
   submitted run followed to success and one stopped) through pytest.

    .venv/bin/python bench/ray_jobs_bench.py [--rollouts 6] [--multinode] [--tests]

Every process and the cluster are this script's own and are stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ppodeck.engine.run.rundir import RunDir, pid_alive, read_status  # noqa: E402
from ppodeck.engine.vocabulary import FINAL_STATES  # noqa: E402


def cli_env(runs: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PPODECK_RUNS_DIR=str(runs), PPODECK_SUBMIT_PYTHON=sys.executable,
               RAY_AUTH_MODE="disabled", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    return env


def first_metric_seconds(rundir: RunDir, started: float, timeout: float = 300) -> float:
    while time.monotonic() - started < timeout:
        if rundir.events_jsonl.exists():
            for line in rundir.events_jsonl.read_text().splitlines():
                if '"kind": "metrics"' in line or '"kind":"metrics"' in line:
                    return time.monotonic() - started
        time.sleep(0.1)
    raise TimeoutError(f"no metric from {rundir.id} within {timeout} s")


def wait_final(rundir: RunDir, timeout: float = 600) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_status(rundir).get("state")
        if state in FINAL_STATES:
            return state
        time.sleep(0.2)
    return "timeout"


def run_cli(args: list[str], env: dict[str, str]) -> None:
    """`ppodeck ARGS --detach`: returns once the run is started; a refusal stops the bench."""
    out = subprocess.run([sys.executable, "-m", "ppodeck", *args], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    if out.returncode:
        raise SystemExit(f"ppodeck {' '.join(args)} failed ({out.returncode}):\n{out.stderr}")


def local_run(runs: Path, rollouts: int) -> float:
    rundir = RunDir(runs / "local")
    started = time.monotonic()
    run_cli(["run", "tiny-cpu", "--set", f"num-rollout={rollouts}", "--run-dir",
             str(rundir.path), "--detach", "--yes"], cli_env(runs))
    seconds = first_metric_seconds(rundir, started)
    print(f"local launch -> first metric: {seconds:.1f} s ({wait_final(rundir)})", flush=True)
    return seconds


def submitted_run(runs: Path, url: str, rollouts: int, cut_after_s: float | None) -> dict:
    rundir = RunDir(runs / ("cut" if cut_after_s else "submitted"))
    env = {**cli_env(runs), "PPODECK_TEST_RAY_GPUS": "1"}
    started = time.monotonic()
    run_cli(["run", "tiny-cpu", "--set", f"num-rollout={rollouts}", "--submit", url,
             "--run-dir", str(rundir.path), "--detach", "--yes"], env)
    seconds = first_metric_seconds(rundir, started)
    cuts = 0
    if cut_after_s:
        from ppodeck.engine.launch.jobs import start_follower

        time.sleep(cut_after_s)
        follower = read_status(rundir)["pid"]
        os.kill(follower, signal.SIGKILL)  # the log stream dies mid-run with its reader
        while pid_alive(follower):
            time.sleep(0.05)
        before = len(rundir.events_jsonl.read_text().splitlines())
        start_follower(rundir)  # reconnects: reads the whole log, then tails it
        cuts = 1
        print(f"cut the stream after {before} events; follower restarted", flush=True)
    state = wait_final(rundir)
    local = rundir.events_jsonl.read_text().splitlines()
    remote_path = Path(job_run_dir(rundir)) / "events.jsonl"
    remote = remote_path.read_text().splitlines()
    lost = len([line for line in remote if line not in set(local)])
    duplicated = len(local) - len(set(local))
    return {"first_metric_s": seconds, "state": state, "events_local": len(local),
            "events_job": len(remote), "lost": lost, "duplicated": duplicated,
            "in_order": local == remote[:len(local)], "cuts": cuts}


def multinode_spread(runs: Path, address: str) -> dict:
    """tiny-cpu on both nodes (TP=2, DP=2) against one rank: the largest loss difference."""
    from tests.cluster.test_multinode_run import losses, run_on_cluster

    one = run_on_cluster(runs / "one", address)
    four = run_on_cluster(runs / "four", address, actor_num_nodes=2,
                          actor_num_gpus_per_node=2, tensor_model_parallel_size=2)
    pairs = list(zip(losses(one[1]), losses(four[1]), strict=True))
    rel = [abs(b[3] - a[3]) / max(abs(a[3]), 1e-12) for a, b in pairs]
    absolute = [abs(b[3] - a[3]) for a, b in pairs]
    return {"states": [one[0]["state"], four[0]["state"]], "losses_compared": len(pairs),
            "max_rel_diff": max(rel), "max_abs_diff": max(absolute)}


def job_run_dir(rundir: RunDir) -> str:
    """Where the job wrote its run directory on the cluster (it says so in its log)."""
    from ppodeck.engine.launch.jobs import client

    log = client(read_status(rundir)["job"]["address"]).get_job_logs(rundir.id)
    marker = "ppodeck: job run directory "
    return next(line[len(marker):] for line in log.splitlines() if line.startswith(marker))


@contextmanager
def ended_followers(runs: Path) -> Iterator[None]:
    """However the bench ends, the local followers it started end too (by their pid)."""
    try:
        yield
    finally:
        for status_file in runs.glob("*/status.json"):
            pid = json.loads(status_file.read_text()).get("pid")
            if isinstance(pid, int) and pid_alive(pid) and "job" in status_file.read_text():
                os.kill(pid, signal.SIGTERM)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rollouts", type=int, default=6)
    parser.add_argument("--tests", action="store_true", help="also run the slow cluster tests")
    parser.add_argument("--multinode", action="store_true",
                        help="also measure tiny-cpu TP=2 DP=2 over both nodes vs one rank")
    ns = parser.parse_args()
    from tests.cluster.conftest import two_node_cluster

    with tempfile.TemporaryDirectory() as tmp, ended_followers(Path(tmp)):
        runs = Path(tmp)
        local = local_run(runs, ns.rollouts)
        with two_node_cluster() as cluster:
            submitted = submitted_run(runs, cluster.dashboard_url, ns.rollouts, None)
            print(f"submitted -> first metric: {submitted['first_metric_s']:.1f} s "
                  f"({submitted['state']})", flush=True)
            cut = submitted_run(runs, cluster.dashboard_url, ns.rollouts, cut_after_s=1.0)
            spread = multinode_spread(runs, cluster.address) if ns.multinode else None
        print(json.dumps({"local_first_metric_s": round(local, 1),
                          "submit_first_metric_s": round(submitted["first_metric_s"], 1),
                          "submit_over_local": round(submitted["first_metric_s"] / local, 2),
                          "cut_stream": cut, "multinode_tp2_dp2_vs_one_rank": spread},
                         indent=2))
    code = 0 if cut["lost"] == 0 and cut["duplicated"] == 0 and cut["in_order"] else 1
    if ns.tests:
        tests = ["tests/cluster/test_multinode_run.py", "tests/cluster/test_jobs_submit.py"]
        code |= subprocess.call([sys.executable, "-m", "pytest", "-q", "-m", "slow", *tests],
                                cwd=REPO)
    return code


if __name__ == "__main__":
    sys.exit(main())
