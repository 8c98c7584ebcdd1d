"""What the machine holds (engine/host/memory.py), and check()'s GPU and host memory rules on it.

No GPU runs here: a fake NVML module is injected at the seam (`read_holdings(nvml=...)`), and
/proc is a directory the test writes. That proves the seam and the rules on it, not that NVML
answers this way on a real driver (the GPU test in tests/gpu does that)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ppodeck.engine.config import check
from ppodeck.engine.config.machine import Machine
from ppodeck.engine.config.memory import DRIVER_RESERVED_GIB
from ppodeck.engine.config.rules_engine import current_machine
from ppodeck.engine.host import memory
from ppodeck.engine.host.memory import GpuMemory, Holder, Holdings, read_holdings, visible_order
from ppodeck.engine.presets import load_preset, resolve_preset
from tests.conftest import CPU_MACHINE, GPU_MACHINE

GIB = 1 << 30


class FakeNVML:
    """pynvml's calls the seam makes, over a list of (uuid, total GiB, free GiB, processes)."""

    def __init__(self, gpus: list[tuple[str, float, float, list[tuple[int, float]]]],
                 fail: bool = False) -> None:
        self.gpus, self.fail = gpus, fail

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802 - pynvml's names
        if self.fail:
            raise RuntimeError("NVML_ERROR_DRIVER_NOT_LOADED")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:  # noqa: N802
        return self.gpus[handle][0].encode()

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:  # noqa: N802, ANN401
        _, total, free, _ = self.gpus[handle]
        return SimpleNamespace(total=int(total * GIB), free=int(free * GIB),
                               used=int((total - free) * GIB))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:  # noqa: N802
        return [SimpleNamespace(pid=pid, usedGpuMemory=int(gib * GIB))
                for pid, gib in self.gpus[handle][3]]


def fake_proc(root: Path, processes: dict[int, tuple[int, int, list[str]]]) -> Path:
    """/proc/PID/stat and cmdline for {pid: (ppid, session, argv)}; meminfo of 24 GiB."""
    for pid, (ppid, session, argv) in processes.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "stat").write_text(f"{pid} (python) S {ppid} {pid} {session} 0 0")
        (root / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (root / "meminfo").write_text("MemTotal:       25165824 kB\nMemAvailable:   "
                                  "12582912 kB\n")
    return root


RUN = "261206-040000-qwen3-0.6b-ppo-1gpu-ab12"


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    """A PPO Deck driver (pid 100, its session) with a Ray worker two levels below it, and an
    unrelated process."""
    return fake_proc(tmp_path / "proc", {
        100: (1, 100, ["python", "-m", "ppodeck.engine.driver", "--run-dir", f"/r/runs/{RUN}"]),
        101: (100, 100, ["raylet"]),
        102: (101, 100, ["ray::TrainWorker.train_critic"]),
        200: (1, 200, ["python", "my_notebook.py"]),
    })


def test_the_seam_reads_free_memory_and_names_a_run_by_its_driver(proc: Path) -> None:
    nvml = FakeNVML([("GPU-aaaa", 79.6, 23.0, [(102, 55.0)]), ("GPU-bbbb", 79.6, 78.4, [])])
    reading = read_holdings(nvml=nvml, cuda_visible_devices=None, proc=proc)
    first, second = reading.gpus or ()
    assert (first.total_gib, first.free_gib) == pytest.approx((79.6, 23.0))
    assert first.holders == (Holder(102, pytest.approx(55.0), RUN,
                                    "ray::TrainWorker.train_critic"),)
    assert first.holders[0].label() == f"run {RUN} (pid 102)"
    assert second.holders == () and second.free_gib == pytest.approx(78.4)
    assert (reading.host_total_gib, reading.host_available_gib) == (24.0, 12.0)


def test_cuda_visible_devices_orders_and_narrows_the_gpus(proc: Path) -> None:
    nvml = FakeNVML([("GPU-aaaa", 80, 10, []), ("GPU-bbbb", 80, 70, [])])
    reading = read_holdings(nvml=nvml, cuda_visible_devices="1", proc=proc)
    assert [(g.index, g.uuid) for g in reading.gpus or ()] == [(0, "GPU-bbbb")]
    assert visible_order(["GPU-a1", "GPU-b2"], "GPU-b,0,0,7") == [1, 0]  # stops at the repeat
    assert visible_order(["GPU-a1"], "") == []
    assert read_holdings(nvml=nvml, cuda_visible_devices="MIG-1", proc=proc).gpus is None


def test_nvml_that_fails_says_why_and_no_nvml_reads_no_gpus(proc: Path) -> None:
    failed = read_holdings(nvml=FakeNVML([], fail=True), cuda_visible_devices=None, proc=proc)
    assert failed.gpus is None and "DRIVER_NOT_LOADED" in failed.gpu_note
    report = check(resolve_preset(load_preset("qwen3-0.6b-ppo-1gpu")),
                   dataclasses.replace(GPU_MACHINE, holdings=failed))
    assert "engine.gpu_memory_unread" in report.codes("info")


# ---- check() against what the GPU holds ------------------------------------------------------


def gpu_machine(*gpus: tuple[float, float, tuple[Holder, ...]]) -> Machine:
    """One GPU machine per (total, free, holders); 512 GiB of RAM, 400 available."""
    reading = Holdings(tuple(GpuMemory(i, f"GPU-{i}", total, free, holders)
                             for i, (total, free, holders) in enumerate(gpus)), 512.0, 400.0)
    return dataclasses.replace(GPU_MACHINE, gpus=len(gpus), holdings=reading)


def qwen06b(**values: Any) -> Any:  # noqa: ANN401
    config = resolve_preset(load_preset("qwen3-0.6b-ppo-1gpu"))
    return config.with_values(**values) if values else config


def test_a_free_gpu_fits_and_a_held_one_is_refused_naming_the_run_and_the_gib() -> None:
    peak = max(row["total"] for row in check(qwen06b(), gpu_machine((79.6, 78.4, ()))
                                             ).derived.memory_gib.values())
    assert 20 < peak < 78.4  # the estimate the rule compares (about 38 GiB for this preset)
    assert check(qwen06b(), gpu_machine((79.6, 78.4, ()))).ok

    live = Holder(4242, 56.0, RUN)
    report = check(qwen06b(), gpu_machine((79.6, 23.0, (live,))))
    [issue] = [i for i in report.errors if i.code == "engine.gpu_memory"]
    need = peak - DRIVER_RESERVED_GIB  # NVML shows the driver's reserve as used already
    assert f"needs about {need:.1f} GiB free per GPU" in issue.message
    assert "23.0 GiB free of 79.6 GiB" in issue.message
    assert f"run {RUN} (pid 4242) 56.0 GiB" in issue.message
    assert f"ppodeck stop {RUN}" in issue.fix and "--max-tokens-per-gpu" in issue.fix


def test_the_refusal_names_a_pid_and_a_gpu_with_room() -> None:
    stranger = Holder(777, 70.0, None, "python my_notebook.py")
    report = check(qwen06b(), gpu_machine((79.6, 9.0, (stranger,)), (79.6, 78.0, ())))
    [issue] = [i for i in report.errors if i.code == "engine.gpu_memory"]
    assert "pid 777 (python my_notebook.py) 70.0 GiB" in issue.message
    assert "CUDA_VISIBLE_DEVICES=1" in issue.fix and "ppodeck stop" not in issue.fix


@pytest.mark.parametrize("free", [30.0, 45.0, 60.0])
def test_the_line_is_the_estimate(free: float) -> None:
    """Free memory varied around the estimate's peak: refused below it, fits above it."""
    machine = gpu_machine((79.6, free, (Holder(9, 79.6 - free, RUN),)))
    peak = max(row["total"] for row in check(qwen06b(), machine).derived.memory_gib.values())
    report = check(qwen06b(), machine)
    fits = peak - DRIVER_RESERVED_GIB <= free
    assert ("engine.gpu_memory" in report.codes("error")) != fits
    if fits:  # fits beside the other run: said, not refused
        assert "engine.gpu_memory_shared" in report.codes("info")


def test_sglang_counts_its_fraction_of_this_gpu() -> None:
    machine = gpu_machine((79.6, 60.0, ()))
    with_sglang = check(qwen06b(rollout_backend="sglang"), machine)
    assert with_sglang.derived.memory_gib["generate"]["rollout"] == pytest.approx(0.8 * 79.6,
                                                                                 abs=0.01)
    assert "engine.gpu_memory" in with_sglang.codes("error")  # 63.7 GiB of SGLang > 60 free
    [issue] = [i for i in with_sglang.errors if i.code == "engine.gpu_memory"]
    assert "--sglang-mem-fraction-static" in issue.fix


# ---- host memory -----------------------------------------------------------------------------


def cpu_machine(ram: float, available: float) -> Machine:
    return dataclasses.replace(CPU_MACHINE, host_memory_bytes=int(ram * GIB),
                               holdings=Holdings(None, ram, available))


def test_cpu_ranks_are_judged_against_the_available_host_memory() -> None:
    big = resolve_preset(load_preset("qwen3-4b-ppo"))
    report = check(big, cpu_machine(24.0, 19.0))
    [issue] = [i for i in report.errors if i.code == "engine.host_memory_cpu"]
    assert "19.0 GiB available of 24.0 GiB RAM" in issue.message
    assert "GiB of host memory" in issue.message and "tiny-cpu" in issue.fix
    tiny = check(resolve_preset(load_preset("tiny-cpu")), cpu_machine(24.0, 19.0))
    assert tiny.ok and tiny.derived.gpus_needed is None and not tiny.derived.memory_gib
    host = tiny.derived.host_memory_gib or {}
    assert host["available"] == 19.0 and 1.0 < host["total"] < 6.0
    starved = check(resolve_preset(load_preset("tiny-cpu")), cpu_machine(24.0, 1.0))
    assert "engine.host_memory_cpu" in starved.codes("error")


def test_offloaded_train_state_is_judged_against_the_available_host_memory() -> None:
    config = resolve_preset(load_preset("qwen3-4b-ppo"))
    machine = gpu_machine(*[(141.0, 140.0, ())] * 4)
    roomy = check(config, machine)
    assert "engine.host_memory" not in roomy.codes()
    tight = dataclasses.replace(machine, holdings=dataclasses.replace(
        machine.holdings, host_available_gib=30.0))
    [issue] = [i for i in check(config, tight).errors if i.code == "engine.host_memory"]
    assert "30.0 GiB available of 512.0 GiB RAM" in issue.message


# ---- the short cache and the live machine ----------------------------------------------------


def test_a_keystroke_check_reuses_a_fresh_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[float] = []

    def reader() -> Holdings:
        reads.append(time.monotonic())
        return Holdings(None, 24.0, 19.0, read_at=time.monotonic())

    memory.forget_reading()
    monkeypatch.setattr("ppodeck.engine.config.rules_engine.live_holdings",
                        lambda: memory.holdings(reader=reader))
    first = current_machine()
    start = time.perf_counter()
    for _ in range(1000):
        assert current_machine() is first
    per_call = (time.perf_counter() - start) / 1000
    assert len(reads) == 1 and per_call < 1e-4, per_call  # microseconds, not a /proc read
    assert memory.holdings(max_age=0.0, reader=reader) is not first.holdings
    memory.forget_reading()


def test_this_machine_reading_is_real() -> None:
    """The live seam on this machine: no fake. GPUs only where NVML answers."""
    reading = read_holdings()
    assert reading.host_total_gib and reading.host_available_gib
    assert 0 < reading.host_available_gib <= reading.host_total_gib
    for gpu in reading.gpus or ():
        assert 0 <= gpu.free_gib <= gpu.total_gib


@pytest.mark.skipif(read_holdings().gpus, reason="a GPU machine runs qwen3-4b-ppo on its GPUs")
def test_qwen3_4b_does_not_validate_on_this_cpu_machine() -> None:
    """`ppodeck validate qwen3-4b-ppo` on a machine without a GPU, as a user runs it."""
    done = subprocess.run([sys.executable, "-m", "ppodeck", "validate", "qwen3-4b-ppo"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, done.stdout
    assert "engine.host_memory_cpu" in done.stdout and "GiB of host memory" in done.stdout
    clean = subprocess.run([sys.executable, "-m", "ppodeck", "validate", "tiny-cpu"],
                           capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0 and "GPUs needed" not in clean.stdout
    assert "host memory GiB (rough, CPU run)" in clean.stdout and "available" in clean.stdout


# ---- the launch pre-flight --------------------------------------------------------------------



def wait_for_cmdline(pid: int, word: str, timeout: float = 10.0) -> None:
    """Until the child has exec'd: between fork and exec its command line is still pytest's,
    and rundir's pid-reuse guard (which reads it) would rightly not name the run."""
    deadline = time.monotonic() + timeout
    cmdline = Path(f"/proc/{pid}/cmdline")
    while word not in cmdline.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"pid {pid} never showed {word} in its command line"
        time.sleep(0.01)

def test_the_launch_preflight_reads_afresh_and_refuses_before_any_run_dir(
        runs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare_run() reads now (never the keystroke cache) and refuses with check()'s message;
    nothing is created. A holder known only from a live run's status.json (its process group,
    which the driver leads as its session) is named by that run."""
    from ppodeck.engine.launch import memory_check
    from ppodeck.engine.launch.local import MemoryRefused, prepare_run
    from ppodeck.engine.run.rundir import RunDir, write_status

    other = RunDir(runs_dir / RUN)
    other.path.mkdir(parents=True)
    # a stand-in driver: its command line names the run (rundir's pid-reuse guard reads it)
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", RUN],
                              start_new_session=True)
    try:
        wait_for_cmdline(driver.pid, RUN)
        write_status(other, state="running", pid=driver.pid, pgid=driver.pid, preset="x")
        monkeypatch.setattr(memory_check, "run_id_of", lambda pid: None)  # no --run-dir

        def reader(run_of_pid: Any) -> Holdings:  # noqa: ANN401
            holder = Holder(driver.pid, 56.0, run_of_pid(driver.pid))
            return Holdings((GpuMemory(0, "GPU-0", 79.6, 23.0, (holder,)),), 512.0, 400.0)

        monkeypatch.setattr(memory_check, "read_holdings", reader)
        monkeypatch.setattr(memory_check, "this_machine", lambda: GPU_MACHINE)
        with pytest.raises(MemoryRefused) as refused:
            prepare_run(qwen06b(), "qwen3-0.6b-ppo-1gpu")
    finally:
        driver.kill()
        driver.wait()
    text = str(refused.value)
    assert text.startswith("not launched: the run needs about ")
    assert f"held: run {RUN} (pid {driver.pid}) 56.0 GiB" in text
    assert f"Fix: stop run {RUN}" in text
    assert [p.name for p in runs_dir.iterdir()] == [RUN]  # no new run directory
    assert prepare_run(qwen06b(), "x", here=False).path.is_dir()  # a Ray job: judged there


def test_auto_is_judged_as_the_backend_it_picks_here() -> None:
    """Without sglang, auto runs hf: its rollout, not SGLang's share of the GPU, is counted."""
    machine = dataclasses.replace(gpu_machine((79.6, 60.0, ())), sglang=False)
    report = check(qwen06b(rollout_backend="auto"), machine)
    assert report.derived.memory_gib["generate"]["rollout"] < 20  # hf, not 0.8 x 79.6
    assert "engine.gpu_memory" not in report.codes()
    with_sglang = check(qwen06b(rollout_backend="auto"), dataclasses.replace(machine, sglang=True))
    assert with_sglang.derived.memory_gib["generate"]["rollout"] == pytest.approx(63.68, abs=0.01)


def test_validate_shows_what_each_taken_gpu_has_free() -> None:
    from ppodeck.app.cli.config import format_derived

    machine = gpu_machine((79.6, 23.0, (Holder(9, 56.0, RUN),)), (79.6, 78.0, ()))
    derived = check(qwen06b(), machine).derived
    assert derived.gpu_free_gib == ((0, 23.0, 79.6),)  # the one GPU the preset takes
    assert "free now: GPU 0 23.0 of 79.6" in format_derived(derived)
    assert check(qwen06b(), GPU_MACHINE).derived.gpu_free_gib == ()  # nothing read
