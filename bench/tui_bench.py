"""TUI benchmarks: time to first paint, event -> panel lag, memory after a 1M-event run.

    .venv/bin/python bench/tui_bench.py                    # all four
    .venv/bin/python bench/tui_bench.py --only lag --seconds 10
    .venv/bin/python bench/tui_bench.py --only pty --compare /tmp/before   # before vs after

Each figure is printed next to its goal as a ratio (< 1.0 meets the goal).
- paint: a fresh `python` process, from just before it is spawned until the preset
  picker's first frame has been composited (headless driver: no terminal I/O).
- pty: what a user waits for: bare `ppodeck` (its console entry point) in a 130x40
  pseudo-terminal, from just before the spawn until the preset list's rows have been
  written to the terminal (the bytes, escape codes stripped, hold the last preset's row).
  `--compare DIR` runs another checkout (e.g. `git worktree add /tmp/before HEAD~3`)
  alternately with this one in the same sitting, so load from other work hits both alike.
- tmux (only with --only tmux): the same in a real terminal, tmux 130x40, polled with
  capture-pane every 20 ms (how issue 16 measured it); --compare works here too.
- lag: a writer thread appends events to a running run's events.jsonl at --rate events/s;
  each event's `ts` is its write time, and lag = when the monitor finished applying it to
  RunState *and* redrawing the widgets, minus that ts.
- memory: a fresh process attaches the monitor to a finished run of --events events and
  reports its RSS once the whole file has been folded in (plus ingest time).
- keys: what a user waits for after a key, in a 160x48 pty (tests/tui/pty_app.py), each
  from the moment the key is written to the terminal until the screen shows its effect:
  Enter on the picker's first preset -> the editor's open groups painted with their fields;
  a key in the flag search -> that character on screen, and -> the groups filtered (the PPO
  group's "N matches" for the query so far, or the search's "N flags match in" line); a key
  in --eps-clip that breaks the config (`-` before 0.2) -> "✖ 1" in the editor's summary.
  With --compare, the
  other checkout runs alternately in the same sitting (the machine is shared: only figures
  from one sitting compare).
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import importlib.util
import json
import os
import re
import select
import shlex
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's ppodeck, not whichever one is installed
OUT = REPO / "bench" / "out"
GOALS = {"paint_s": 0.8, "lag_s": 0.25, "rss_mb": 300.0, "key_char_s": 0.05,
         "search_s": 0.1, "validation_s": 0.15, "open_editor_s": 0.3}


def _load_test_module(name: str, relative: str):
    spec = importlib.util.spec_from_file_location(name, REPO / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_make_events():
    spec = importlib.util.spec_from_file_location(
        "make_events", REPO / "tests" / "fixtures" / "make_events.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _report(name: str, value: float, goal: float, unit: str, extra: str = "") -> None:
    print(f"{name:<34} {value:9.3f} {unit:<3} goal <= {goal:g} {unit:<3} "
          f"ratio {value / goal:5.2f}  {'OK' if value <= goal else 'MISS'}  {extra}")


def _env(tmp: Path, tree: Path = REPO) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("config", "state", "runs"):
        (tmp / name).mkdir(exist_ok=True)
    env.update(PPODECK_CONFIG_DIR=str(tmp / "config"), PPODECK_STATE_DIR=str(tmp / "state"),
               PPODECK_RUNS_DIR=str(tmp / "runs"), PYTHONPATH=str(tree))
    return env


def _trees(compare: Path | None) -> list[tuple[str, Path]]:
    """(label, checkout) pairs to measure: this one, and --compare's before it."""
    if compare is None:
        return [("", REPO)]
    if not (compare / "app" / "tui" / "app.py").is_file():
        raise SystemExit(f"--compare {compare}: not a PPO Deck checkout (no app/tui/app.py)")
    return [(f" [{compare}]", compare.resolve()), (" [this checkout]", REPO)]


# ---- time to first paint ---------------------------------------------------------------------

PAINT_CHILD = """
import sys, time, psutil
start = float(sys.argv[1])  # the parent's clock just before it started this process
from ppodeck.app.tui.app import PPODeckApp
from ppodeck.app.tui.screens.presets import PresetPickerScreen

async def auto_pilot(pilot):
    app = pilot.app
    while not isinstance(app.screen, PresetPickerScreen) or not app.screen.is_mounted:
        await pilot.pause(0.001)
    await pilot.pause()  # one refresh: the first frame is composited
    cpu = psutil.Process().cpu_times()
    app.exit((time.time() - start, cpu.user + cpu.system))

print(*PPODeckApp().run(headless=True, auto_pilot=auto_pilot, size=(120, 36)))
"""


def _paint_once(tree: Path, env: dict[str, str]) -> tuple[float, float]:
    # psutil's create_time is only as exact as the kernel's boot time (whole seconds):
    # the parent's clock right before the spawn is the honest process start.
    out = subprocess.run([sys.executable, "-c", PAINT_CHILD, repr(time.time())],
                         env=env, cwd=tree, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise SystemExit(f"paint child failed:\n{out.stderr[-2000:]}")
    wall, cpu_s = out.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu_s)


def bench_paint(runs: int, compare: Path | None = None) -> None:
    trees = _trees(compare)
    times: dict[Path, list[float]] = {tree: [] for _, tree in trees}
    cpu: dict[Path, list[float]] = {tree: [] for _, tree in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(runs):
            for _, tree in trees:  # alternate, so a load spike hits both checkouts
                wall, cpu_s = _paint_once(tree, _env(Path(tmp), tree))
                times[tree].append(wall)
                cpu[tree].append(cpu_s)
    for label, tree in trees:
        _report("time to first paint (median)" + label, statistics.median(times[tree]),
                GOALS["paint_s"], "s",
                f"runs={runs} min={min(times[tree]):.3f} max={max(times[tree]):.3f}")
        # CPU seconds of the process up to that frame: the wall time on an idle machine
        _report("  CPU time to first paint (median)" + label, statistics.median(cpu[tree]),
                GOALS["paint_s"], "s")


# ---- time to the preset list in a pseudo-terminal --------------------------------------------

ANSI = re.compile(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][0-9A-Za-z]|\x1b[=>]")


def _entry_code(tree: Path) -> str:
    """Python that runs the checkout's `ppodeck` console entry point as the installed script."""
    with open(tree / "pyproject.toml", "rb") as handle:
        target = tomllib.load(handle)["project"]["scripts"]["ppodeck"]
    module, func = target.split(":")
    return (f"import sys; sys.argv[0] = 'ppodeck'; from {module} import {func}; "
            f"sys.exit({func}())")


def _list_painted_mark() -> re.Pattern[bytes]:
    """The last row of the preset table: once it is on the terminal, the list is painted."""
    from ppodeck.engine.presets import list_presets

    last = list_presets()[-1]
    return re.compile(re.escape(last.name.encode()) + rb" +" + re.escape(last.source.encode()))


def _pty_once(tree: Path, env: dict[str, str], mark: re.Pattern[bytes],
              size: tuple[int, int]) -> tuple[float, float]:
    """(wall, CPU) seconds from the spawn until the list is on the terminal."""
    import psutil

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
    start = time.time()
    proc = subprocess.Popen([sys.executable, "-c", _entry_code(tree)], stdin=slave,
                            stdout=slave, stderr=slave, env=env, cwd=tree,
                            start_new_session=True)
    os.close(slave)
    seen = b""
    try:
        while not mark.search(ANSI.sub(b"", seen)):
            ready, _, _ = select.select([master], [], [], 30)
            if not ready:
                raise SystemExit(f"no preset list after 30 s; the terminal got:\n{seen[-2000:]!r}")
            seen += os.read(master, 1 << 16)
        wall = time.time() - start
        cpu = psutil.Process(proc.pid).cpu_times()
        return wall, cpu.user + cpu.system
    finally:
        proc.terminate()  # our child: the app restores the terminal and exits
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.close(master)


def bench_pty(runs: int, compare: Path | None = None, size: tuple[int, int] = (130, 40)) -> None:
    trees = _trees(compare)
    mark = _list_painted_mark()
    times: dict[Path, list[float]] = {tree: [] for _, tree in trees}
    cpu: dict[Path, list[float]] = {tree: [] for _, tree in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(runs):
            for _, tree in trees:
                env = dict(_env(Path(tmp), tree), TERM="xterm-256color")
                wall, cpu_s = _pty_once(tree, env, mark, size)
                times[tree].append(wall)
                cpu[tree].append(cpu_s)
                time.sleep(0.3)  # let the finished process's exit settle
    print(f"bare ppodeck in a {size[0]}x{size[1]} pty, until the preset list is written:")
    for label, tree in trees:
        values = times[tree]
        _report("  to preset list (median)" + label, statistics.median(values),
                GOALS["paint_s"], "s", f"runs={runs} " + " ".join(f"{v:.3f}" for v in values))
        # the process's CPU seconds by then: the wall time on an idle machine
        _report("  CPU to preset list (median)" + label, statistics.median(cpu[tree]),
                GOALS["paint_s"], "s")


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


def _tmux_once(tree: Path, env: dict[str, str], mark: re.Pattern[bytes],
               size: tuple[int, int], session: str) -> float:
    """Seconds from `tmux new-session` until capture-pane shows the preset list's last row."""
    names = ("PPODECK_CONFIG_DIR", "PPODECK_STATE_DIR", "PPODECK_RUNS_DIR", "PYTHONPATH")
    exports = " ".join(f"{k}={shlex.quote(env[k])}" for k in names)
    command = (f"cd {shlex.quote(str(tree))} && env {exports} {shlex.quote(sys.executable)} -c "
               f"{shlex.quote(_entry_code(tree))}")
    start = time.time()
    _tmux("new-session", "-d", "-x", str(size[0]), "-y", str(size[1]), "-s", session, command)
    try:
        while not mark.search(_tmux("capture-pane", "-p", "-t", session).encode()):
            if time.time() - start > 30:
                raise SystemExit(f"no preset list in tmux after 30 s:\n"
                                 f"{_tmux('capture-pane', '-p', '-t', session)}")
            time.sleep(0.02)  # each poll is a tmux client process: poll gently on 2 cores
        return time.time() - start
    finally:
        _tmux("kill-session", "-t", session)


def bench_tmux(runs: int, compare: Path | None = None, size: tuple[int, int] = (130, 40)) -> None:
    """What issue 16 measured: a real terminal (tmux), polled with capture-pane every 20 ms."""
    if shutil.which("tmux") is None:
        raise SystemExit("--only tmux needs tmux on PATH")
    trees = _trees(compare)
    mark = _list_painted_mark()
    times: dict[Path, list[float]] = {tree: [] for _, tree in trees}
    anchor = f"tui-bench-{os.getpid()}"
    _tmux("new-session", "-d", "-s", anchor, "sleep 3600")  # the server stays up between runs
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for number in range(runs):
                for index, (_, tree) in enumerate(trees):
                    times[tree].append(_tmux_once(tree, _env(Path(tmp), tree), mark, size,
                                                  f"{anchor}-{number}-{index}"))
                    time.sleep(0.5)
    finally:
        _tmux("kill-session", "-t", anchor)
    print(f"bare ppodeck in tmux {size[0]}x{size[1]}, until capture-pane shows the preset list:")
    for label, tree in trees:
        _report("  to preset list (median)" + label, statistics.median(times[tree]),
                GOALS["paint_s"], "s",
                f"runs={runs} " + " ".join(f"{v:.3f}" for v in times[tree]))


# ---- event -> panel lag ----------------------------------------------------------------------

def _writer(path: Path, rate: int, seconds: float, stop: threading.Event,
            written: list[int]) -> None:
    """Append realistic events at `rate`/s in 10 ms slices, each stamped with its write time."""
    make_events = _load_make_events()
    source = make_events.generate(num_rollout=100_000, seed=1)
    per_tick, tick = max(1, rate // 100), 0.01
    deadline = time.monotonic() + seconds
    next_tick = time.monotonic()
    with open(path, "a", encoding="utf-8") as out:
        while time.monotonic() < deadline and not stop.is_set():
            now = time.time()
            lines = []
            for _ in range(per_tick):
                event = next(source)
                event["ts"] = now
                lines.append(json.dumps(event, separators=(",", ":")))
            out.write("\n".join(lines) + "\n")
            out.flush()
            written.append(per_tick)
            next_tick += tick
            time.sleep(max(0.0, next_tick - time.monotonic()))


def bench_lag(rate: int, seconds: float, flush_s: float | None = None) -> None:
    """`flush_s`: the monitor's batching interval for this run (default: the shipped one)."""
    from ppodeck.app.tui import screens
    from ppodeck.app.tui.app import PPODeckApp
    from ppodeck.app.tui.screens.monitor import MonitorScreen
    from ppodeck.engine.run.state import RunState

    shipped = screens.monitor.FLUSH_S
    screens.monitor.FLUSH_S = shipped if flush_s is None else flush_s
    label = f" [flush {screens.monitor.FLUSH_S:.2f} s]"

    lags: list[float] = []
    last_batch: list[list[dict]] = [[]]
    original_apply, original_refresh = RunState.apply, MonitorScreen._refresh_all

    def apply(self, events):  # remember the batch so the redraw hook can time it
        last_batch[0] = list(events)
        return original_apply(self, events)

    def refresh_all(self, changed):
        original_refresh(self, changed)
        now = time.time()
        lags.extend(now - e["ts"] for e in last_batch[0] if isinstance(e.get("ts"), float))
        last_batch[0] = []

    RunState.apply, MonitorScreen._refresh_all = apply, refresh_all
    with tempfile.TemporaryDirectory() as tmp:
        for key, value in _env(Path(tmp)).items():
            os.environ[key] = value
        run = Path(tmp) / "runs" / "bench-live"
        run.mkdir()
        (run / "events.jsonl").touch()
        (run / "status.json").write_text(json.dumps(
            {"state": "running", "pid": 1, "host": "bench-elsewhere", "started": time.time()}))
        stop, written = threading.Event(), []
        writer = threading.Thread(target=_writer, args=(run / "events.jsonl", rate, seconds,
                                                        stop, written), daemon=True)

        async def auto_pilot(pilot):
            app = pilot.app
            while not isinstance(app.screen, MonitorScreen):
                await pilot.pause(0.01)
            writer.start()
            while writer.is_alive():
                await pilot.pause(0.05)
            await pilot.pause(1.0)  # let the last batch land
            app.exit()

        PPODeckApp(attach=str(run)).run(headless=True, auto_pilot=auto_pilot, size=(160, 48))
        stop.set()
    RunState.apply, MonitorScreen._refresh_all = original_apply, original_refresh
    screens.monitor.FLUSH_S = shipped
    if not lags:
        raise SystemExit("no events reached the monitor")
    lags.sort()
    p95 = lags[int(0.95 * (len(lags) - 1))]
    extra = (f"events={len(lags)}/{sum(written)} rate={rate}/s p50={lags[len(lags) // 2]:.3f} "
             f"max={lags[-1]:.3f}")
    _report("event -> panel lag (mean)" + label, statistics.fmean(lags), GOALS["lag_s"], "s",
            extra)
    _report("event -> panel lag (p95)" + label, p95, GOALS["lag_s"], "s")


# ---- memory after a 1,000,000-event run --------------------------------------------------------

MEMORY_CHILD = """
import sys, time, psutil
from ppodeck.app.tui.app import PPODeckApp
from ppodeck.app.tui.screens.monitor import MonitorScreen

async def auto_pilot(pilot):
    app = pilot.app
    start = time.perf_counter()
    while not isinstance(app.screen, MonitorScreen) or app.screen.tail_ended is None:
        await pilot.pause(0.1)
    await pilot.pause()
    screen = app.screen
    seen = screen.state.events_seen if isinstance(screen, MonitorScreen) else -1
    app.exit((psutil.Process().memory_info().rss, time.perf_counter() - start, seen))

app = PPODeckApp(attach=sys.argv[1])
rss, seconds, seen = app.run(headless=True, auto_pilot=auto_pilot, size=(160, 48))
print(rss, seconds, seen)
"""


def _big_run(events: int) -> Path:
    """A finished run dir with `events` recorded events (cached under bench/out/)."""
    make_events = _load_make_events()
    per_rollout = 672 / 20  # events_tiny.jsonl: 672 events over 20 rollouts
    rollouts = int(events / per_rollout * 1.05) + 1  # a little extra; the loop stops at `events`
    run = OUT / f"run-{events}"
    path = run / "events.jsonl"
    if not (run / "status.json").is_file():
        run.mkdir(parents=True, exist_ok=True)
        count = 0
        with open(path, "w", encoding="utf-8") as out:
            for event in make_events.generate(num_rollout=rollouts, seed=2):
                out.write(json.dumps(event, separators=(",", ":")) + "\n")
                count += 1
                if count >= events:
                    break
        (run / "status.json").write_text(json.dumps(
            {"state": "succeeded", "started": make_events.T0, "num_rollout": rollouts}))
    return run


def bench_memory(events: int) -> None:
    started = time.perf_counter()
    run = _big_run(events)
    prepared = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(run)], env=_env(Path(tmp)),
                             cwd=REPO, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"memory child failed:\n{out.stderr[-2000:]}")
    rss, seconds, seen = out.stdout.strip().splitlines()[-1].split()
    size_mb = (run / "events.jsonl").stat().st_size / 1e6
    extra = (f"events={int(seen)} file={size_mb:.0f} MB ingest={float(seconds):.1f}s "
             f"({int(seen) / float(seconds):,.0f} ev/s; file prepared in {prepared:.1f}s)")
    _report("RSS after a 1M-event run", int(rss) / 1e6, GOALS["rss_mb"], "MB", extra)


# ---- key latencies in a pty ------------------------------------------------------------------

SEARCH_WORD = "eps-clip"
SETTLE_S = 3.0  # between steps: each measures one key on an app that has caught up


def _matches(query: str) -> tuple[int, int]:
    """(the PPO group's matches, all matches) for `query`."""
    from ppodeck.app.tui.screens.edit import flag_matches
    from ppodeck.engine.config import FLAGS

    hits = [f for f in FLAGS if flag_matches(f, query)]
    return sum(f.group == "ppo" for f in hits), len(hits)


def _since(pty, written: float, pattern: str) -> float:
    pty.wait_for(pattern)
    return time.monotonic() - written


def _keys_once(tree: Path, env: dict[str, str], figures: dict[str, list[float]]) -> None:
    pty_app = _load_test_module("pty_app", "tests/tui/pty_app.py")
    pty = pty_app.PtyApp(tree, env)
    try:
        pty.wait_for(r"Choose a preset")
        pty.wait_for(_list_painted_mark().pattern.decode())
        time.sleep(SETTLE_S)
        pty.set_mark()
        figures["open_editor_s"].append(_since(pty, pty.write("enter"),
                                               r"--critic-num-nodes\s+unset"))
        time.sleep(SETTLE_S)
        shown = None  # the PPO group's match count on screen
        for end in range(1, len(SEARCH_WORD) + 1):
            query = SEARCH_WORD[:end]
            pty.set_mark()
            written = pty.write(query[-1])
            figures["key_char_s"].append(_since(pty, written, re.escape(query)))
            matches, total = _matches(query)
            if matches != shown:  # an unchanged count is not repainted: nothing to wait for
                # the PPO group's title, or the search's summary line above the groups (when
                # the groups the search opened push the PPO group below the screen)
                figures["search_s"].append(_since(
                    pty, written, rf"PPO algorithm \(\d+\)\s+{matches} match|"
                                  rf"\b{total} flags? match in"))
                shown = matches
            time.sleep(SETTLE_S / 4)
        pty.write("enter")  # to the first match, --eps-clip (0.2 in every preset here)
        time.sleep(SETTLE_S)
        pty.write("home")
        time.sleep(SETTLE_S)
        pty.set_mark()
        figures["validation_s"].append(_since(pty, pty.write("-"), r"✖ 1\s"))
        pty.write("ctrl+q")
    finally:
        pty.close()


# first in the picker (names sort), valid on a CPU machine, --eps-clip set to 0.2
BENCH_PRESET = """\
name = "0-keys-bench"
description = "tiny-cpu for bench/tui_bench.py --only keys"
extends = "tiny-cpu"

[flags]
eps-clip = 0.2
"""


def bench_keys(runs: int, compare: Path | None = None) -> None:
    trees = _trees(compare)
    names = ("key_char_s", "search_s", "validation_s", "open_editor_s")
    figures = {tree: {name: [] for name in names} for _, tree in trees}
    with tempfile.TemporaryDirectory() as tmp:
        team = Path(tmp) / "team"
        team.mkdir()
        (team / "0-keys-bench.toml").write_text(BENCH_PRESET)
        for _ in range(runs):
            for _, tree in trees:  # alternate, so a load spike hits both checkouts
                env = dict(_env(Path(tmp), tree), PPODECK_PRESET_PATH=str(team))
                _keys_once(tree, env, figures[tree])
    print(f"key latencies in a 160x48 pty, {runs} app start(s) per checkout:")
    for label, tree in trees:
        for name in names:
            values = figures[tree][name]
            _report(f"  {name} (median){label}", statistics.median(values), GOALS[name], "s",
                    f"n={len(values)} p90={sorted(values)[int(0.9 * (len(values) - 1))]:.3f} "
                    f"max={max(values):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("paint", "pty", "tmux", "lag", "memory", "keys"))
    parser.add_argument("--paint-runs", type=int, default=5)
    parser.add_argument("--compare", type=Path, metavar="DIR",
                        help="paint/pty: also measure this checkout, alternating with this one")
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--flush-s", type=float, action="append",
                        help="also measure the lag at this batching interval (repeatable)")
    args = parser.parse_args()
    print(f"cpus={os.cpu_count()} load={os.getloadavg()[0]:.1f} python={sys.version.split()[0]}")
    if args.only in (None, "paint"):
        bench_paint(args.paint_runs, args.compare)
    if args.only in (None, "pty"):
        bench_pty(args.paint_runs, args.compare)
    if args.only in (None, "keys"):
        bench_keys(args.paint_runs, args.compare)
    if args.only == "tmux":  # not in the default set: it needs tmux
        bench_tmux(args.paint_runs, args.compare)
    if args.only in (None, "lag"):
        bench_lag(args.rate, args.seconds)
        for flush_s in args.flush_s or []:
            bench_lag(args.rate, args.seconds, flush_s)
    if args.only in (None, "memory"):
        bench_memory(args.events)
    asyncio.set_event_loop(None)


if __name__ == "__main__":
    main()
