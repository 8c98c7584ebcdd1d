"""Runs started at the same moment from the same preset never share or clobber a directory;
presets saved concurrently to one path are never seen half-written."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from ppodeck.engine.presets import load_preset, resolve_preset
from ppodeck.engine.run.rundir import RunDir, read_status
from tests.reliability import helpers

RUNS_AT_ONCE = 4


def test_runs_started_together_get_their_own_directories(runs_dir: Path, isolated_config: Path,
                                                         started: list[int]) -> None:
    env = {**helpers.cli_env(runs_dir), "PPODECK_DRIVER_MODULE": "tests.runs.fake_driver",
           "FAKE_DRIVER_MODE": "succeed"}
    procs = [subprocess.Popen([*helpers.PPODECK, "run", "tiny-cpu", "--detach", "--set",
                               f"seed={i}"], cwd=helpers.REPO, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i in range(RUNS_AT_ONCE)]
    ids = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        ids.append(out.strip())
    assert len(set(ids)) == RUNS_AT_ONCE, ids
    expected = resolve_preset(load_preset("tiny-cpu"))
    for run_id in ids:
        rundir = RunDir(runs_dir / run_id)
        started.append(read_status(rundir)["pid"])
        helpers.wait_until(lambda r=rundir: read_status(r)["state"] == "succeeded", 30, run_id)
        status = read_status(rundir)
        # the fake driver records the argv it got: its own directory, nobody else's
        argv = json.loads((rundir.path / "argv.json").read_text())
        assert argv == ["--run-dir", str(rundir.path.resolve())]
        config = resolve_preset(load_preset(str(rundir.config_toml)))
        seed = config.get("seed")
        assert config.with_values(seed=None).values == expected.with_values(seed=None).values
        assert f"--seed {seed}" in rundir.command_txt.read_text()
        assert status["preset"] == "tiny-cpu"
    seeds = {resolve_preset(load_preset(str(runs_dir / i / "config.toml"))).get("seed")
             for i in ids}
    assert seeds == set(range(RUNS_AT_ONCE)), "a run's config.toml was overwritten by another"
    pids = {read_status(RunDir(runs_dir / i))["pid"] for i in ids}
    assert len(pids) == RUNS_AT_ONCE


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from ppodeck.engine.presets import save_preset
    path, me = Path(sys.argv[1]), int(sys.argv[2])
    text = f"# writer {me}\\n" + ("x" * (1000 * (me + 1)) + "\\n") * 20
    for _ in range(150):
        save_preset(path, text)
""")


def test_concurrent_preset_saves_are_atomic(tmp_path: Path) -> None:
    path = tmp_path / "presets" / "shared.toml"
    writers = 5
    texts = {f"# writer {me}\n" + ("x" * (1000 * (me + 1)) + "\n") * 20 for me in range(writers)}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(me)],
                              cwd=helpers.REPO) for me in range(writers)]
    reads = 0
    while any(proc.poll() is None for proc in procs):
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        assert text in texts, f"a partial preset was visible ({len(text)} chars)"
        reads += 1
    assert all(proc.wait() == 0 for proc in procs)
    assert reads > 10, reads
    assert path.read_text() in texts
    assert [p.name for p in path.parent.iterdir()] == ["shared.toml"], "temp files left"
