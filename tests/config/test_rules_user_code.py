"""check() on the reward code users bring: found without being run, fast, every code tripped."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ppodeck.engine.config import check
from ppodeck.engine.config import rules_user_code as rules_module
from ppodeck.engine.config.code_paths import check_code_path, files_to_ship

from .conftest import CPU_MACHINE
from .test_rules import config

MODULE = '''
import os
raise SystemExit("check() must never import this file")

async def score(args, sample, **kwargs):
    return 1.0

def plain(args, sample):
    return 1.0
'''
STD = "miles.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"


@pytest.fixture(autouse=True)
def launch_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    code = tmp_path / "launch"
    (code / "rmpkg").mkdir(parents=True)
    (code / "rmpkg" / "__init__.py").write_text('raise SystemExit("not imported either")\n')
    (code / "rmpkg" / "rewards.py").write_text(MODULE)
    (code / "my_rm.py").write_text(MODULE)
    (code / "broken_rm.py").write_text("def score(args, sample)\n    return 1\n")
    monkeypatch.setenv("PPODECK_CODE_DIR", str(code))
    return code


# a prompt file whose samples name their own rm_type (3 of them math, 1 none)
NAMED_DATA = str(Path(__file__).parent / "data" / "rm_type_named.jsonl")


def codes(**changes: Any) -> set[str]:  # noqa: ANN401
    return check(config(**changes), CPU_MACHINE).codes()


# (code, changes that trip it, changes that pass it)
CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("engine.user_code_missing", {"custom_rm_path": "no_such_module.score"},
     {"custom_rm_path": "my_rm.score"}),
    ("engine.miles_builtin_mapped", {"dynamic_sampling_filter_path": STD}, {}),
    ("engine.reward_fn_sync", {"custom_rm_path": "my_rm.plain"},
     {"custom_rm_path": "my_rm.score"}),
    ("rollout.custom_rm_overrides", {"custom_rm_path": "my_rm.score"},
     {"custom_rm_path": "my_rm.score", "rm_type": None}),
    ("rollout.group_rm_rule_reward", {"group_rm": True},
     {"group_rm": True, "custom_rm_path": "my_rm.score"}),
    ("rollout.group_rm_eval", {"group_rm": True, "eval_interval": 5,
                               "eval_prompt_data": ("x", "/d/x.jsonl")},
     {"eval_interval": 5, "eval_prompt_data": ("x", "/d/x.jsonl")}),
    ("rollout.rm_url_scheme", {"rm_type": "remote_rm", "rm_url": "127.0.0.1:8000"},
     {"rm_type": "remote_rm", "rm_url": "http://127.0.0.1:8000"}),
    ("rollout.rm_url_unused", {"rm_url": "http://127.0.0.1:8000"},
     {"rm_type": "remote_rm", "rm_url": "http://127.0.0.1:8000"}),
    ("rollout.rm_url_required", {"rm_type": "boxed_remote_rm", "rm_url": None},
     {"rm_type": "boxed_remote_rm", "rm_url": "http://127.0.0.1:8000"}),
    ("rollout.rm_type_overridden", {"prompt_data": NAMED_DATA, "synthetic_task": None},
     {"prompt_data": NAMED_DATA, "synthetic_task": None, "rm_type": "math"}),
    ("rollout.over_sampling_unfiltered", {"over_sampling_batch_size": 32},
     {"over_sampling_batch_size": 32, "dynamic_sampling_filter_path": STD}),
]


@pytest.mark.parametrize(("code", "trip", "ok"), CASES, ids=[c[0] for c in CASES])
def test_rule_trips_and_passes(code: str, trip: dict[str, Any], ok: dict[str, Any]) -> None:
    assert code in codes(**trip)
    assert code not in codes(**ok)


def test_every_code_has_a_case() -> None:
    source = Path(rules_module.__file__).read_text()
    found = set(re.findall(r'"(?:error|warning|info)", "([a-z_]+\.[a-z0-9_]+)"', source))
    assert found == {c[0] for c in CASES}


@pytest.mark.parametrize("engine", ["ppodeck", "miles"])
@pytest.mark.parametrize("rm_type", ["remote_rm", "boxed_remote_rm"])
def test_every_remote_rm_type_needs_an_url_on_both_engines(rm_type: str, engine: str) -> None:
    report = check(config(rm_type=rm_type, rm_url=None), CPU_MACHINE, engine=engine)
    issue = next(i for i in report.issues if i.code == "rollout.rm_url_required")
    assert issue.level == "error" and f"--rm-type {rm_type}" in issue.message


def test_a_metadata_rm_type_that_beats_the_flag_is_named_with_both_values_and_a_count() -> None:
    report = check(config(prompt_data=NAMED_DATA, synthetic_task=None, rm_type="remote_rm",
                          rm_url="http://127.0.0.1:8000"), CPU_MACHINE)
    issue = next(i for i in report.issues if i.code == "rollout.rm_type_overridden")
    assert issue.level == "warning"
    assert "--rm-type remote_rm is not used for 3 of the 4 samples" in issue.message
    assert "rm_type math (3)" in issue.message
    assert "remove rm_type from those samples'" in issue.fix


def test_remote_rm_and_custom_functions_are_runnable_rewards() -> None:
    assert not {"engine.rm_type", "engine.refused"} & codes(rm_type="remote_rm",
                                                            rm_url="http://h:1/r")
    assert check(config(custom_rm_path="rmpkg.rewards.score", rm_type=None,
                        group_rm=True, over_sampling_batch_size=32,
                        dynamic_sampling_filter_path=STD,
                        custom_reward_post_process_path="my_rm.plain"), CPU_MACHINE).ok


def test_the_module_and_function_are_found_without_running_them() -> None:
    env = os.environ
    assert check_code_path("rmpkg.rewards.score", env).problem is None  # no SystemExit: not run
    assert "rmpkg.rewards" not in sys.modules and "rmpkg" not in sys.modules
    missing = check_code_path("my_rm.scor", env)
    assert missing.problem is not None and "defines no 'scor' at its top level" in \
        missing.problem and missing.fix.startswith("define scor in")
    broken = check_code_path("broken_rm.score", env)
    assert broken.problem is not None and "does not parse (line 1" in broken.problem
    assert check_code_path("my_rm", env).problem == ("'my_rm' is not a dotted Python path "
                                                     "(module.function)")
    unfound = check_code_path("no_such.mod.fn", env).problem
    assert unfound.startswith("module 'no_such.mod' is not found in the working directory")
    assert check_code_path(STD, env).mapped_to == (
        "ppodeck.engine.rollout.filters.check_reward_nonzero_std")


def test_a_check_with_user_code_stays_fast() -> None:
    cfg = config(custom_rm_path="rmpkg.rewards.score", dynamic_sampling_filter_path=STD,
                 custom_reward_post_process_path="my_rm.plain")
    check(cfg, CPU_MACHINE)  # the file scans are cached after the first check
    start = time.perf_counter()
    for _ in range(20):
        check(cfg, CPU_MACHINE)
    per_check = (time.perf_counter() - start) / 20
    assert per_check < 0.02, f"{per_check * 1000:.1f} ms per check"


def test_a_ray_job_ships_the_user_modules_not_installed_ones(launch_dir: Path) -> None:
    shipped = files_to_ship(["rmpkg.rewards.score", "my_rm.score", STD,
                             "json.decoder.JSONDecoder",
                             "ppodeck.engine.rollout.filters.check_no_aborted"], os.environ)
    assert shipped == [str(launch_dir / "rmpkg"), str(launch_dir / "my_rm.py")]


def test_a_ray_jobs_runtime_env_carries_the_reward_module(launch_dir: Path,
                                                          tmp_path: Path) -> None:
    """A package goes in py_modules; a single-file module (which the Jobs SDK does not upload
    as a py_module) goes as a package of the same name whose __init__.py is the file."""
    from ppodeck.engine.launch import jobs

    text = ('[flags]\ncustom-rm-path = "rmpkg.rewards.score"\n'
            f'dynamic-sampling-filter-path = "{STD}"\n')
    staging = tmp_path / "staging"
    staging.mkdir()
    env = jobs.runtime_env(text, {}, staging)
    assert env["py_modules"] == [str(staging / "ppodeck"), str(launch_dir / "rmpkg")]
    assert (staging / "ppodeck" / "engine" / "launch" / "jobs.py").is_file()
    staging = tmp_path / "staging2"
    staging.mkdir()
    text += 'custom-reward-post-process-path = "my_rm.plain"\n'
    env = jobs.runtime_env(text, {}, staging)
    assert env["py_modules"][2] == str(staging / "my_rm")
    assert (staging / "my_rm" / "__init__.py").read_text() == (launch_dir / "my_rm.py").read_text()
    assert "PPODECK_CODE_DIR" not in jobs.forwarded_env({"PPODECK_CODE_DIR": "/x"})


def test_an_eval_sets_metadata_rm_type_that_beats_the_flag_is_named_too() -> None:
    """Eval samples are scored with the training reward: their metadata wins there too."""
    report = check(config(eval_interval=5, eval_prompt_data=("named", NAMED_DATA),
                          rm_type="remote_rm", rm_url="http://127.0.0.1:8000"), CPU_MACHINE)
    issue = next(i for i in report.issues if i.code == "rollout.rm_type_overridden")
    assert issue.flags == ("--rm-type", "--eval-prompt-data")
    assert f"is not used for 3 of the 4 samples in {NAMED_DATA}" in issue.message
