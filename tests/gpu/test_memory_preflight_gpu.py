"""The memory pre-flight on a real GPU (device only: `python -m pytest tests/gpu -m gpu -q`): a
process holding most of the GPU, its command line carrying `--run-dir` as a PPO Deck driver's
does, makes check() and the launch pre-flight refuse qwen3-0.6b-ppo-1gpu, naming the GiB and
that run; once it is gone the same config fits. NVML is the real one here (pynvml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ppodeck.engine.host.memory import read_holdings
from ppodeck.engine.launch.memory_check import fresh_machine, memory_refusals
from ppodeck.engine.presets import load_preset, resolve_preset

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

RUN = "261206-000000-qwen3-0.6b-ppo-1gpu-live"
HOLD = ("import sys, time, torch\n"
        "x = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device='cuda')\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n")


def _hold(gib: float, runs: Path) -> subprocess.Popen[str]:
    """A stand-in for a live run's process: it holds `gib` GiB and names its run directory."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(gib), "--run-dir",
                               str(runs / RUN)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_the_preflight_refuses_beside_a_live_run_and_lets_it_start_after(tmp_path: Path) -> None:
    config = resolve_preset(load_preset("qwen3-0.6b-ppo-1gpu"))
    first = (read_holdings().gpus or ())[0]
    holder = _hold(first.free_gib - 16.0, tmp_path)  # leaves 16 GiB: the preset needs ~33
    try:
        reading = fresh_machine()
        refused = memory_refusals(config, reading)
        seen = (reading.holdings.gpus or ())[0] if reading.holdings else None
        print(f"GPU 0 while held: {seen}")
        print("\n".join(f"{i.code}: {i.message} Fix: {i.fix}" for i in refused))
        [issue] = refused
        assert issue.code == "engine.gpu_memory" and "GiB free per GPU" in issue.message
        assert seen is not None and seen.free_gib < 20.0
        pids = [p.pid for p in seen.holders]
        if holder.pid in pids:  # NVML and this process see the same pid namespace
            assert f"run {RUN} (pid {holder.pid})" in issue.message
            assert f"ppodeck stop {RUN}" in issue.fix
        else:
            print(f"NVML reports pids {pids}, not {holder.pid}: another pid namespace")
        cli = subprocess.run([sys.executable, "-m", "ppodeck", "validate",
                              "qwen3-0.6b-ppo-1gpu"], capture_output=True, text=True,
                             timeout=120)
        assert cli.returncode == 1 and "engine.gpu_memory" in cli.stdout, cli.stdout
    finally:
        holder.kill()
        holder.wait()
    assert memory_refusals(config, fresh_machine()) == []  # the GPU is free again
