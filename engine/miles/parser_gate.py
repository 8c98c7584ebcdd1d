"""The user's own miles as the last gate (issue #46): that checkout's parse_args() on the argv
`ppodeck command --engine miles` prints, in its own Python, before a miles launch (LIGHT).

PPO Deck's miles rules mirror one pinned miles; a newer checkout may refuse more. So
`validate --engine miles`, `run --engine miles` and the TUI's launch dialog also run
engine/miles/parse_runner.py in the miles Python (`--miles-python`, $PPODECK_MILES_PYTHON,
else the python3 that would launch train.py) with the checkout and its Megatron on PYTHONPATH,
as the job would get them, in a subprocess bounded by `--miles-parser-timeout` /
$PPODECK_MILES_PARSER_TIMEOUT (0 skips it and says so). A refusal is an error issue quoting
miles' last exception line and its raise site; a miles that cannot be imported, or a parser
that runs past the bound, is a warning that says what to fix. Verdicts are kept under
$PPODECK_HOME/miles-parser-gate by (argv, environment, checkout state, python), so a second
validate of the same command is instant.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config.issues import Issue
from .drive import PYTHON_ENV, megatron_path, runtime_env_vars, train_argv

if TYPE_CHECKING:
    from ..config import RunConfig

TIMEOUT_ENV = "PPODECK_MILES_PARSER_TIMEOUT"
DEFAULT_TIMEOUT_S = 60.0
CACHE_SUBDIR = "miles-parser-gate"
RUNNER = Path(__file__).with_name("parse_runner.py")
PARSER_FILE = Path("miles") / "utils" / "arguments.py"  # where miles' parse_args lives
CODE_REFUSES = "miles.own_parser_refuses"
CODE_UNAVAILABLE = "miles.own_parser_unavailable"
CODE_SKIPPED = "miles.own_parser_skipped"
CODE_ACCEPTS = "miles.own_parser_accepts"


class GateSetupError(ValueError):
    """A bad --miles-parser-timeout or $PPODECK_MILES_PARSER_TIMEOUT; str() says the fix."""


@dataclass(frozen=True)
class GateSetup:
    """Which miles judges, in which Python, for how long at most (0: not at all)."""

    root: Path
    python: str
    timeout_s: float


@dataclass(frozen=True)
class Verdict:
    """What the checkout's parser said: accept, refuse, unavailable (with why) or skipped."""

    outcome: str
    error: str = ""
    site: str = ""
    seconds: float = 0.0
    cached: bool = False


def parse_timeout(text: str, source: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise GateSetupError(
            f"{source} {text!r}: not a number of seconds. Fix: give seconds "
            f"(e.g. 60), or 0 to skip miles' own parser"
        )
    return value


def gate_setup(
    miles_root: Path,
    python: str | None = None,
    timeout_s: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> GateSetup:
    """The flags first, then the environment, then the defaults."""
    env = os.environ if environ is None else environ
    if timeout_s is None:
        text = env.get(TIMEOUT_ENV, "")
        timeout_s = parse_timeout(text, f"${TIMEOUT_ENV}") if text else DEFAULT_TIMEOUT_S
    elif timeout_s < 0:
        raise GateSetupError(
            f"--miles-parser-timeout {timeout_s:g}: negative. Fix: give "
            "seconds, or 0 to skip miles' own parser"
        )
    return GateSetup(
        Path(miles_root).expanduser().resolve(),
        python or env.get(PYTHON_ENV) or "python3",
        timeout_s,
    )


def job_environment(
    config: RunConfig, setup: GateSetup, environ: Mapping[str, str]
) -> dict[str, str]:
    """The variables the miles job would see (miles' runtime_env over ours): miles' parser
    reads some of them (MILES_EXPERIMENTAL_FT_TRAINER, CUDA_DEVICE_MAX_CONNECTIONS)."""
    return {**environ, **runtime_env_vars(setup.root, config, environ, has_nvlink=False)}


def judge(
    config: RunConfig,
    setup: GateSetup,
    environ: Mapping[str, str] | None = None,
    cache_dir: Path | None = None,
) -> Verdict:
    """The checkout's verdict on the config's miles argv; never raises, never hangs."""
    if setup.timeout_s == 0:
        return Verdict("skipped")
    if not (setup.root / PARSER_FILE).is_file():
        return Verdict(
            "unavailable",
            f"no {PARSER_FILE} under {setup.root}, so it is not a "
            "miles checkout whose parser can be run",
        )
    env = job_environment(config, setup, os.environ if environ is None else environ)
    argv = train_argv(config, show_secrets=True)[0]
    key = _cache_key(argv, env, setup)
    cache = (cache_dir or default_cache_dir()) / f"{key}.json"
    kept = _read_cached(cache)
    if kept is not None:
        return kept
    verdict = _run_parser(argv, env, setup)
    if verdict.outcome in ("accept", "refuse"):  # an environment failure may be fixed anytime
        _write_cached(cache, verdict)
    return verdict


def default_cache_dir() -> Path:
    from ..config.resolve import ppodeck_home
    from ..host.machine import environment

    return Path(ppodeck_home(environment())) / CACHE_SUBDIR


def _run_parser(argv: list[str], env: dict[str, str], setup: GateSetup) -> Verdict:
    python = shutil.which(setup.python) or setup.python
    roots = [str(setup.root), *([m] if (m := megatron_path(env, setup.root)) else [])]
    command = [python, str(RUNNER), *[a for root in roots for a in ("--site-root", root)]]
    cases = json.dumps([{"id": "gate", "argv": argv, "env": {}}])
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )  # its own group: a timeout ends all
    except OSError as exc:
        return Verdict("unavailable", f"cannot start {setup.python}: {exc.strerror or exc}")
    try:
        out, err = proc.communicate(cases, timeout=setup.timeout_s)
    except subprocess.TimeoutExpired:
        _end_group(proc)
        return Verdict(
            "unavailable", f"it ran past {setup.timeout_s:g} s", seconds=time.perf_counter() - start
        )
    seconds = time.perf_counter() - start
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if not rows:
        last = [ln for ln in err.splitlines() if ln.strip()]
        why = last[-1] if last else f"exit status {proc.returncode}, no verdict"
        return Verdict(
            "unavailable", f"{setup.python} did not run the parser: {why[:300]}", seconds=seconds
        )
    row = rows[-1]
    if row["verdict"] == "unavailable" or _import_failure(row):
        return Verdict(
            "unavailable",
            f"miles does not import in {setup.python}: {row['error']}",
            row.get("site", ""),
            seconds,
        )
    return Verdict(row["verdict"], row["error"], row["site"], seconds)


def _import_failure(row: dict) -> bool:
    """An ImportError raised while parsing is the environment missing a module, not miles
    judging the flags."""
    return row["verdict"] == "refuse" and row["error"].startswith(
        ("ModuleNotFoundError:", "ImportError:")
    )


def _end_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.communicate()


def _cache_key(argv: list[str], env: Mapping[str, str], setup: GateSetup) -> str:
    """What a verdict depends on: the argv, the variables miles reads, the python, the
    checkout's commit and its newest source file (an uncommitted edit counts), the runner."""
    python = shutil.which(setup.python) or setup.python
    megatron = megatron_path(env, setup.root)
    state = {
        "argv": argv,
        "env": {k: v for k, v in sorted(env.items()) if _read_by_miles(k)},
        "python": [os.path.realpath(python), _mtime(Path(python))],
        "miles": [_git_head(setup.root), _newest(setup.root / "miles")],
        "megatron": [
            megatron,
            _newest(Path(megatron) / "megatron" / "training") if megatron else 0.0,
        ],
        "runner": _mtime(RUNNER),
    }
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:32]


def _read_by_miles(name: str) -> bool:
    return name in (
        "PYTHONPATH",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "CUDA_VISIBLE_DEVICES",
    ) or name.startswith(("MILES_", "MEGATRON_", "NVTE_"))


def _git_head(root: Path) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _newest(tree: Path) -> float:
    return max((_mtime(p) for p in tree.rglob("*.py")), default=0.0)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _read_cached(path: Path) -> Verdict | None:
    try:
        data = json.loads(path.read_text())
        return Verdict(**{**data, "cached": True})
    except (OSError, ValueError, TypeError):
        return None


def _write_cached(path: Path, verdict: Verdict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**asdict(verdict), "cached": False}) + "\n")
    except OSError:
        pass  # no cache only costs the next validate the parser's time


# --------------------------------------------------------------------------------- as issues


def verdict_issues(verdict: Verdict, setup: GateSetup) -> list[Issue]:
    """The verdict as check()'s issues: refusal an error, unavailable a warning, else infos."""
    where = f"miles' own parser ({setup.root}, {setup.python})"
    took = "cached verdict" if verdict.cached else f"{verdict.seconds:.1f} s"
    if verdict.outcome == "refuse":
        at = f" (raised at {verdict.site})" if verdict.site else ""
        return [
            Issue(
                "error",
                CODE_REFUSES,
                _flags_named(verdict.error),
                f"{where} refuses this command: {verdict.error}{at}; {took}.",
                "change the flags it names: this is the miles checkout the launch "
                "would run, whatever PPO Deck's own rules say",
            )
        ]
    if verdict.outcome == "unavailable":
        return [
            Issue(
                "warning",
                CODE_UNAVAILABLE,
                (),
                f"{where} was not run to the end: {verdict.error}; the launch is judged "
                "by PPO Deck's rules alone.",
                f"point --miles-python (or ${PYTHON_ENV}) at the Python miles runs in, "
                f"with miles' dependencies and Megatron importable (${TIMEOUT_ENV} or "
                "--miles-parser-timeout gives a slow import more seconds)",
            )
        ]
    if verdict.outcome == "skipped":
        return [
            Issue(
                "info",
                CODE_SKIPPED,
                (),
                f"miles' own parser at {setup.root} was not run: its timeout is 0.",
                f"set --miles-parser-timeout (or ${TIMEOUT_ENV}) above 0 to run it",
            )
        ]
    return [Issue("info", CODE_ACCEPTS, (), f"{where} accepts this command; {took}.", "")]


def _flags_named(error: str) -> tuple[str, ...]:
    from ..config.schema import BY_NAME

    named = re.findall(r"--[a-z0-9][a-z0-9-]*", error)
    return tuple(dict.fromkeys(name for name in named if name in BY_NAME))


def own_parser_issues(
    config: RunConfig,
    miles_root: Path,
    python: str | None = None,
    timeout_s: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[Issue]:
    """judge() as issues, for the CLI; a bad timeout setting raises GateSetupError."""
    setup = gate_setup(miles_root, python, timeout_s, environ)
    return verdict_issues(judge(config, setup, environ), setup)
