"""miles' own parser as the oracle of PPO Deck's verdict (issue #46).

    python -m bench.miles_oracle --miles-git DIR --megatron-git DIR     # build, judge, record
    python -m bench.miles_oracle --check-sources --miles-git DIR --megatron-git DIR

Builds once, under ~/.cache/ppodeck/miles-oracle (outside the repo), a CPU virtualenv with
miles' parse-time dependencies from PyPI and the miles and Megatron sources at the pinned
commits (exported from the git repositories given, the GitHub ones by default). Then it runs
miles' real parse_args() over the corpus (bench/miles_oracle_corpus.py) with the argv that
`ppodeck command --engine miles` prints, in one interpreter that parses every argv in turn
(engine/miles/parse_runner.py, which the parser gate runs too), and writes each verdict into
tests/miles_oracle/verdicts.json with the commits. tests/miles_oracle/test_agreement.py holds
PPO Deck's check() to them.

--check-sources reads, in those git repositories, the file and line each miles-mirroring rule
cites (engine/config/miles_sources.py) at the pinned commits, or at --miles-rev/--megatron-rev
to see what a newer miles would drift, and reports every rule whose quoted snippet is no longer
on its line (moved, or gone); it exits 1 when any drifted.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.miles_oracle_corpus import SEED, build_corpus, case_config, make_fixtures
from ppodeck.engine.config.miles_sources import MEGATRON_COMMIT, MILES_COMMIT, SOURCES
from ppodeck.engine.miles.drive import runtime_env_vars

SGLANG = "sglang==0.5.16"  # the base image of miles' Dockerfile at MILES_COMMIT
# what miles' parse_args imports, PyPI names; torch pinned to the CPU wheel (an unpinned one
# pulls a CUDA build); sglang without its dependencies (they pin a CUDA torch)
PACKAGES = ("torch==2.13.0", "transformers==5.12.1", "ray==2.60.0", "sglang-router", "pyyaml",
            "pydantic", "numpy", "packaging", "psutil", "requests", "einops", "omegaconf",
            "pybase64", "msgspec", "pyzmq", "pillow", "IPython", "dill", "openai",
            "partial_json_parser", "xgrammar", "sentencepiece", "polars", "matplotlib",
            "six", "orjson", "fastapi", "uvicorn", "uvloop", "aiohttp", "setproctitle", "triton")
CACHE = Path.home() / ".cache" / "ppodeck" / "miles-oracle"
REPO = Path(__file__).resolve().parent.parent
VERDICTS = REPO / "tests" / "miles_oracle" / "verdicts.json"
RUNNER = REPO / "engine" / "miles" / "parse_runner.py"


def _say(text: str) -> None:
    print(f"miles_oracle: {text}", file=sys.stderr, flush=True)


def build_env(miles_git: str, megatron_git: str) -> Path:
    """The cached oracle environment; built once, kept by commit."""
    env = CACHE / f"env-{MILES_COMMIT[:9]}-{MEGATRON_COMMIT[:9]}"
    if (env / "ready").exists():
        return env
    for name, git, commit in (("miles", miles_git, MILES_COMMIT),
                              ("megatron", megatron_git, MEGATRON_COMMIT)):
        _export(git, commit, env / "src" / name)
    venv = env / "venv"
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    pins = env / "pins.txt"
    pins.write_text("torch==2.13.0\n")
    _say("installing miles' parse-time dependencies (a few minutes, once)")
    subprocess.run([*pip, "-c", str(pins), *PACKAGES], check=True)
    subprocess.run([*pip, "--no-deps", SGLANG], check=True)
    (env / "ready").write_text(f"{MILES_COMMIT}\n{MEGATRON_COMMIT}\n")
    return env


def _git_dir(git: str) -> str:
    """A local git directory: `git` itself, or a bare clone of the URL in the cache."""
    if Path(git).is_dir():
        return git
    clone = CACHE / "git" / Path(git).name
    if not clone.exists():
        subprocess.run(["git", "clone", "--bare", git, str(clone)], check=True)
    return str(clone)


def _export(git: str, commit: str, into: Path) -> None:
    if into.exists():
        return
    into.mkdir(parents=True)
    git = _git_dir(git)
    archive = subprocess.run(["git", "-C", git, "archive", commit], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)


def judge(env: Path, cases: list[dict], workers: int) -> dict[str, dict]:
    """miles' verdict per case id: `workers` interpreters, each parsing its share in turn."""
    shares = [cases[i::workers] for i in range(workers)]
    environ = {**os.environ, "PYTHONPATH": f"{env / 'src' / 'miles'}:{env / 'src' / 'megatron'}"}
    # sites relative to src/: "miles/miles/utils/arguments.py:3707", as recorded
    runner = [str(env / "venv" / "bin" / "python"), str(RUNNER), "--site-root", str(env / "src")]
    procs = [subprocess.Popen(runner,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env=environ)
             for _ in shares]
    for proc, share in zip(procs, shares, strict=True):
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(share))
        proc.stdin.close()
    verdicts = {}
    for proc in procs:
        assert proc.stdout is not None
        for line in proc.stdout:
            row = json.loads(line)
            if row["verdict"] == "unavailable":
                sys.exit(f"miles_oracle: miles' parser does not import in {env}: "
                         f"{row['error']}; nothing written")
            verdicts[row.pop("id")] = row
        proc.wait()
    return verdicts


def _scrubbed(row: dict, root: str, env: Path) -> dict:
    """The verdict with this machine's paths in miles' messages replaced by names, so the
    record is the same wherever the oracle ran."""
    error = row["error"].replace(root, "{ROOT}").replace(str(env), "{ORACLE_ENV}")
    return {**row, "error": re.sub(r"/\S*/site-packages/", "{site-packages}/", error)}


def _runnable(case: dict, root: Path, env: Path) -> dict:
    """The case as the runner parses it: the argv PPO Deck launches with, under the variables
    PPO Deck's launch gives the job (runtime_env_vars: CUDA_DEVICE_MAX_CONNECTIONS=1 for
    Megatron, which validate_args asserts when TP or CP > 1), then the case's own."""
    config, argv = case_config(case, root)
    job_env = runtime_env_vars(env / "src" / "miles", config, {}, has_nvlink=False)
    job_env.pop("PYTHONPATH")  # the runner's interpreter has its own; set at start only
    return {"id": case["id"], "argv": argv, "env": {**job_env, **case["env"]}}


def source_drift(gits: dict[str, str], revs: dict[str, str]) -> list[str]:
    """One line per cited rule whose snippet is not on its line at `revs`: moved, or gone."""
    files: dict[tuple[str, str], list[str] | None] = {}
    drifted = []
    for source in SOURCES:
        key = (source.repo, source.path)
        if key not in files:
            shown = subprocess.run(["git", "-C", gits[source.repo], "show",
                                    f"{revs[source.repo]}:{source.path}"],
                                   capture_output=True, text=True, check=False)
            files[key] = shown.stdout.splitlines() if shown.returncode == 0 else None
        lines = files[key]
        where = f"{source.code}: {source.repo} {source.path}:{source.line}"
        if lines is None:
            drifted.append(f"{where}: the file is gone")
        elif source.line > len(lines) or source.snippet not in lines[source.line - 1]:
            found = [i + 1 for i, text in enumerate(lines) if source.snippet in text]
            drifted.append(f"{where}: moved to line {', '.join(map(str, found))}" if found else
                           f"{where}: {source.snippet!r} is gone")
    return drifted


def check_sources(miles_git: str, megatron_git: str, miles_rev: str, megatron_rev: str) -> int:
    gits = {"miles": _git_dir(miles_git), "megatron": _git_dir(megatron_git)}
    revs = {repo: subprocess.run(["git", "-C", gits[repo], "rev-parse", "--verify", rev],
                                 capture_output=True, text=True, check=True).stdout.strip()
            for repo, rev in (("miles", miles_rev), ("megatron", megatron_rev))}
    drifted = source_drift(gits, revs)
    for line in drifted:
        print(f"drifted  {line}")
    print(f"{len(SOURCES)} cited rules, {len(drifted)} drifted (miles {revs['miles'][:9]}, "
          f"Megatron {revs['megatron'][:9]})")
    return 1 if drifted else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--miles-git", default="https://github.com/radixark/miles")
    parser.add_argument("--megatron-git", default="https://github.com/radixark/Megatron-LM")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--check-sources", action="store_true",
                        help="report rules whose cited miles/Megatron line drifted; no parsing")
    parser.add_argument("--miles-rev", default=MILES_COMMIT,
                        help="with --check-sources: the miles revision to check against")
    parser.add_argument("--megatron-rev", default=MEGATRON_COMMIT,
                        help="with --check-sources: the Megatron revision to check against")
    args = parser.parse_args()
    if args.check_sources:
        sys.exit(check_sources(args.miles_git, args.megatron_git, args.miles_rev,
                               args.megatron_rev))
    env = build_env(args.miles_git, args.megatron_git)
    cases = build_corpus()
    with tempfile.TemporaryDirectory() as root:
        make_fixtures(Path(root), cases)
        runnable = [_runnable(c, Path(root), env) for c in cases]
        start = time.perf_counter()
        verdicts = {ident: _scrubbed(row, root, env) for ident, row in
                    judge(env, runnable, args.workers).items()}
        seconds = time.perf_counter() - start
    errors = {row["error"] for row in verdicts.values()}
    if len(verdicts) > 1 and len(errors) == 1 and errors != {""}:
        # one refusal for every case is the environment failing (a missing module, no CUDA),
        # not miles judging the flags: recording it would be a fake oracle
        sys.exit(f"miles_oracle: every case fails the same way ({errors.pop()}); the oracle "
                 f"environment under {env} is broken, nothing written")
    for case in cases:
        case["miles"] = verdicts.get(case["id"], {"verdict": "missing", "error": "", "site": ""})
    counts: dict[str, int] = {}
    for case in cases:
        counts[case["kind"]] = counts.get(case["kind"], 0) + 1
    VERDICTS.parent.mkdir(parents=True, exist_ok=True)
    VERDICTS.write_text(json.dumps({
        "miles_commit": MILES_COMMIT, "megatron_commit": MEGATRON_COMMIT, "sglang": SGLANG,
        "corpus_seed": SEED, "counts": counts, "cases": cases}, indent=1) + "\n")
    refused = sum(c["miles"]["verdict"] == "refuse" for c in cases)
    _say(f"{len(cases)} cases ({counts}), miles refuses {refused}; parsed in {seconds:.0f} s; "
         f"wrote {VERDICTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()
