"""Every `PPODECK_*` environment variable, declared once: docs/environment.md and `ppodeck --help`
are generated from this table, and a test keeps it equal to the names the code, the tests and
the benches use.

PURE: stdlib only. The modules that read a variable keep their own `os.environ` lookup, at the
edges: the pure config layer reads none, and takes the environment as an argument (a
Machine's `env`, filled by engine/host/machine.py's `environment()`); tests/contracts/
test_env_vars.py fails on any read in engine/config/ or on a name this table does not hold.
"""

from __future__ import annotations

from dataclasses import dataclass

DOC_TITLE = "# Environment variables"


@dataclass(frozen=True)
class EnvVar:
    name: str
    audience: str  # "user": where things live; "switch": engine escape hatches and bench
    # baselines; "internal": set by PPO Deck for its own processes; "test": tests only
    default: str
    what: str


ENV_VARS: tuple[EnvVar, ...] = (
    # --- where things live
    EnvVar("PPODECK_HOME", "user", "~/.cache/ppodeck",
           "models and data `ppodeck prepare` fetches and converts; `${PPODECK_HOME}` may appear "
           "in path flags"),
    EnvVar("PPODECK_CONFIG_DIR", "user", "platformdirs' user config dir",
           "the user's config dir; presets saved by the user live in its presets/"),
    EnvVar("PPODECK_PRESET_PATH", "user", "(empty)",
           "colon-separated team preset dirs, searched after the built-ins and the user's"),
    EnvVar("PPODECK_RUNS_DIR", "user", "./runs",
           "where run directories are created (on a cluster job: the job's own runs dir)"),
    EnvVar("PPODECK_LOG_DIR", "user", "platformdirs' user log dir",
           "where unexpected CLI errors are logged (mode 0600, secret values masked)"),
    EnvVar("PPODECK_STATE_DIR", "user", "platformdirs' user state dir",
           "the TUI's unsaved flag edits (drafts), so nothing typed is lost"),
    EnvVar("PPODECK_RAY_JOB_HEADERS", "user", "(none)",
           "a JSON object of HTTP headers for the Ray Jobs API (`--submit` to a cluster behind "
           "auth)"),
    EnvVar("PPODECK_SUBMIT_PYTHON", "user", "python",
           "the cluster's Python for a submitted job's entrypoint"),
    EnvVar("PPODECK_MILES_PYTHON", "user", "python3",
           "the Python that runs miles' train.py for `ppodeck run --engine miles` (miles' "
           "launchers use python3), and its own parser before the launch"),
    EnvVar("PPODECK_MILES_PARSER_TIMEOUT", "user", "60",
           "seconds miles' own parse_args() may take when `validate`/`run --engine miles` and "
           "the TUI's launch run the --miles-root checkout's parser (0 skips it and says so)"),
    EnvVar("PPODECK_MEGATRON_PATH", "user", "Megatron-LM next to --miles-root",
           "the Megatron-LM checkout put on miles' PYTHONPATH for `--engine miles`"),
    EnvVar("PPODECK_MILES_DASHBOARD", "user", "1",
           "0: `--engine miles` does not add --use-miles-dashboard; the run is watched through "
           "the events/ records miles' --dump-details writes (for a miles install whose "
           "dashboard cannot run)"),
    EnvVar("PPODECK_MILES_DIRECT", "user", "0",
           "1: `--engine miles` runs train.py as its supervisor's child on the private Ray head "
           "even where Ray's Jobs API is installed (without it, it does so anyway and says why)"),
    EnvVar("PPODECK_MILES_DEPARTURES", "user", "unset",
           "a JSON list of {what, why}: how this machine's miles setup departs from miles' own "
           "image (shims, stubs, carried packages); `--engine miles` shows each in the run's log "
           "and events (bench/miles_gpu/shims.sh writes one)"),
    # --- engine switches (escape hatches, bench baselines); the defaults are what was measured best
    EnvVar("PPODECK_FUSED", "switch", "1",
           "0 turns every CUDA fast path of the trainer off (fused ops and compiled layers)"),
    EnvVar("PPODECK_COMPILE_LAYERS", "switch", "1",
           "0 keeps the trainer's per-op fusion instead of compiling each transformer layer whole"),
    EnvVar("PPODECK_TE", "switch", "0",
           "1 uses transformer-engine's layer spec where it imports (CUDA)"),
    EnvVar("PPODECK_ATTENTION", "switch", "(the engine's SDPA attention)",
           "unfused: Megatron-core's stock local attention instead of the engine's"),
    EnvVar("PPODECK_DECODE", "switch", "the measured default variant",
           "the hf backend's CUDA decoder: `ref` or a `+`-joined feature list, e.g. "
           "packed+decode-attn (the features, their status and figures: "
           "engine/rollout/decoder/features.py)"),
    EnvVar("PPODECK_FAST_GENERATE", "switch", "1",
           "0: the hf backend decodes with transformers' generate on CUDA, not the static-cache "
           "decoder"),
    EnvVar("PPODECK_WEIGHT_SYNC", "switch", "(CUDA IPC where the GPU is shared)",
           "packed: weights reach the rollout as packed host bytes through Ray (a baseline)"),
    EnvVar("PPODECK_OVERLAP_MOVES", "switch", "1",
           "0 waits on every offload/onload move instead of overlapping it with the next phase"),
    EnvVar("PPODECK_INIT_OVERLAP", "switch", "(by free GPU memory)",
           "0: start actor, critic and rollout one after another (miles' order); 1: at once"),
    EnvVar("PPODECK_SGLANG_ATTENTION", "switch", "triton",
           "SGLang's attention backend for the rollout engines"),
    EnvVar("PPODECK_SGLANG_LOG_LEVEL", "switch", "error",
           "SGLang's log level in driver.log (info shows where an engine's start goes)"),
    EnvVar("PPODECK_SGLANG_SAMPLING_SEED", "switch", "1",
           "0 leaves the per-request sampling seed out of SGLang requests"),
    EnvVar("PPODECK_MILES_IDLE_S", "switch", "600",
           "seconds a watched miles dump may go unwritten before its run counts as ended "
           "(miles records no final state)"),
    # --- set by PPO Deck for its own processes; not for users to set
    EnvVar("PPODECK_DRIVER_MODULE", "internal", "ppodeck.engine.driver",
           "the module the launcher starts as the driver (tests put a stand-in there)"),
    EnvVar("PPODECK_JOB_CONFIG", "internal", "(set at submit)",
           "the resolved config.toml handed to a Ray Job's entrypoint"),
    EnvVar("PPODECK_EVENT", "internal", "-",
           "the prefix of event lines a Ray Job relays through its log stream (not a variable)"),
    EnvVar("PPODECK_SECRET_", "internal", "-",
           "prefix: secret flag values (--wandb-key) travel to the driver in "
           "PPODECK_SECRET_<DEST>, never in the run directory"),
    EnvVar("PPODECK_PLACEMENT_SLOTS", "internal", "-",
           "the placement group's bundle order, handed to each worker process"),
    EnvVar("PPODECK_CODE_DIR", "internal", "(the launch directory)",
           "where the driver and workers look for user code named by flags (--custom-rm-path)"),
    EnvVar("PPODECK_LAUNCHER_ARGS", "internal", "-",
           "a miles Python launcher's own options (JSON list), handed to `--run-launcher`'s "
           "recording subprocess"),
    EnvVar("PPODECK_", "internal", "-",
           "the prefix itself: the variables forwarded to a Ray Job are those that start with it"),
    # --- tests only
    EnvVar("PPODECK_TEST_RAY_GPUS", "test", "0",
           "N > 0: a private local Ray declares N fake GPUs so CPU machines test GPU placement"),
    EnvVar("PPODECK_RELIABILITY_FIGURES", "test", "(unset: no figures kept)",
           "a JSON file the reliability tests add their measured figures to (set by "
           "bench/reliability_figures.py)"),
    EnvVar("PPODECK_TEST_HOLD_PHASE", "test", "(unset)",
           "NAME:ROLLOUT: the driver waits 300 s when that phase starts, so a test's SIGKILL "
           "lands there on a loaded machine too (tests/reliability/killed_run.py)"),
    EnvVar("PPODECK_TEST_FLIP_ADVANTAGES", "test", "0",
           "1: the actor trains on negated advantages, a deliberately broken loss that "
           "`ppodeck canary` must catch (its own test)"),
)

BY_NAME = {var.name: var for var in ENV_VARS}

_SECTIONS = (
    ("user", "Where things live"),
    ("switch", "Engine switches (escape hatches and bench baselines; the defaults were measured "
               "best)"),
    ("internal", "Set by PPO Deck for its own processes (do not set them)"),
    ("test", "Tests only"),
)


def markdown() -> str:
    """docs/environment.md, whole."""
    lines = [DOC_TITLE, "",
             "Generated from `engine/env_vars.py` (`python -m ppodeck.engine.env_vars > "
             "docs/environment.md`); a test keeps the two equal.", ""]
    for audience, title in _SECTIONS:
        lines += [f"## {title}", "", "| variable | default | what it does |", "|---|---|---|"]
        lines += [f"| `{v.name}` | {v.default} | {v.what} |"
                  for v in ENV_VARS if v.audience == audience and v.name != "PPODECK_"]
        lines.append("")
    return "\n".join(lines)


def cli_help() -> str:
    """The Environment section of `ppodeck --help` (click's \\b keeps its lines)."""
    users = [v for v in ENV_VARS if v.audience == "user"]
    width = max(len(v.name) for v in users) + 2
    body = "\n".join(f"  {v.name.ljust(width)}{v.what.split(';')[0].split(' (')[0]}" for v in users)
    return f"\b\nEnvironment:\n{body}\n"


if __name__ == "__main__":
    print(markdown(), end="")
