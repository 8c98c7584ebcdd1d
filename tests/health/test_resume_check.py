"""Resume integrity before Ray starts: trackers, iterations, actor/critic agreement (light,
on directory layouts), optimizer state and the critic's value head (on real torch_dist
checkpoints), and `ppodeck run --resume` refusing before it touches the run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ppodeck.engine.config import resolve
from ppodeck.engine.config.resolve import TRACKER
from ppodeck.engine.launch.local import LaunchError, prepare_resume, prepare_run
from ppodeck.engine.launch.resume_check import (
    CheckpointIntegrityError,
    check_or_raise,
    light_problems,
    load_sources,
    preflight_problems,
)
from ppodeck.engine.presets import load_preset, resolve_preset
from ppodeck.engine.run.rundir import write_status
from ppodeck.engine.run.save_manifest import write_manifest


def fake_checkpoint(root: Path, *iterations: int, tracker: str | None = None,
                    complete: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for it in iterations:
        d = root / f"iter_{it:07d}"
        d.mkdir()
        if complete:  # a whole save: its files and the manifest written with them
            (d / "metadata.json").write_text("{}")
            write_manifest(d)
    tag = tracker if tracker is not None else str(max(iterations))
    (root / TRACKER).write_text(tag)
    return root


def args_for(save: Path, warmup: int = 1, **values) -> dict:
    config = resolve_preset(load_preset("tiny-cpu")).with_values(
        save=str(save), load=str(save), num_critic_only_steps=warmup, **values)
    return resolve(config, os.environ)


def test_a_consistent_resume_passes(tmp_path: Path) -> None:
    fake_checkpoint(tmp_path / "ck", 3, 7)
    fake_checkpoint(tmp_path / "ck_critic", 3, 7)
    args = args_for(tmp_path / "ck")
    assert [(s.role, s.resume) for s in load_sources(args)] == [("actor", True),
                                                                ("critic", True)]
    assert light_problems(args) == []


def test_the_tracker_must_name_an_existing_complete_iteration(tmp_path: Path) -> None:
    fake_checkpoint(tmp_path / "ck", 3, tracker="9")
    fake_checkpoint(tmp_path / "ck_critic", 3)
    (problem,) = light_problems(args_for(tmp_path / "ck"))
    assert "--load" in problem and str(tmp_path / "ck") in problem
    assert "iteration 9" in problem and "iter_0000003" in problem and "Fix:" in problem

    fake_checkpoint(tmp_path / "bad", 3, tracker="latest")
    fake_checkpoint(tmp_path / "bad_critic", 3)
    (problem,) = light_problems(args_for(tmp_path / "bad"))
    assert "'latest'" in problem and "Fix:" in problem

    fake_checkpoint(tmp_path / "cut", 3)
    fake_checkpoint(tmp_path / "cut_critic", 3, complete=False)
    (problem,) = light_problems(args_for(tmp_path / "cut"))
    assert "--critic-load" in problem and "metadata.json" in problem


def test_actor_and_critic_must_resume_from_the_same_iteration(tmp_path: Path) -> None:
    fake_checkpoint(tmp_path / "ck", 3)
    fake_checkpoint(tmp_path / "ck_critic", 3, 5)
    (problem,) = light_problems(args_for(tmp_path / "ck"))
    assert "iteration 3" in problem and "iteration 5" in problem and "write 3" in problem


def test_a_critic_alone_is_fine_only_during_the_warmup(tmp_path: Path) -> None:
    fake_checkpoint(tmp_path / "ck_critic", 0)
    assert light_problems(args_for(tmp_path / "ck", warmup=1)) == []
    fake_checkpoint(tmp_path / "late_critic", 4)
    (problem,) = light_problems(args_for(tmp_path / "late", warmup=1))
    assert "past the critic-only warmup" in problem and "--load" in problem


def test_resume_refuses_before_touching_the_run(runs_dir: Path) -> None:
    config = resolve_preset(load_preset("tiny-cpu")).with_values(save="${RUN_DIR}/ck")
    rundir = prepare_run(config, "tiny-cpu")
    write_status(rundir, state="failed")
    fake_checkpoint(rundir.path / "ck", 2)
    fake_checkpoint(rundir.path / "ck_critic", 2, 4)
    events = b'{"v":1,"ts":1,"kind":"status","state":"running"}\n'
    rundir.events_jsonl.write_bytes(events)
    with pytest.raises(LaunchError, match="cannot resume.*iteration 2.*iteration 4"):
        prepare_resume(rundir, config)
    assert rundir.events_jsonl.read_bytes() == events  # nothing moved


# -- real torch_dist checkpoints: optimizer state and the value head ----------------------------

@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """An actor and a critic saved with optimizer state, and an actor saved without."""
    pytest.importorskip("megatron.core")
    import torch.distributed as dist

    from ppodeck.engine.driver.cluster import free_port
    from ppodeck.engine.train.checkpoint import save_checkpoint
    from ppodeck.engine.train.platform import Parallelism, init_distributed, shutdown_distributed
    from tests.train.test_checkpoint import build

    root = tmp_path_factory.mktemp("real")
    owner = not dist.is_initialized()
    if owner:
        init_distributed(0, 1, "127.0.0.1", free_port(), Parallelism(), seed=1234)
    try:
        actor, opt, sched = build("actor")
        save_checkpoint(root / "ck", 2, [actor], opt, sched, extra={})
        save_checkpoint(root / "weights_only", 2, [actor], None, None, extra={})
        critic, copt, csched = build("critic", seed=3)
        save_checkpoint(root / "ck_critic", 2, [critic], copt, csched, extra={})
    finally:
        if owner:
            shutdown_distributed()
    return root


def test_real_checkpoints_pass_and_a_policy_critic_or_missing_optimizer_fail(saved) -> None:
    assert preflight_problems(args_for(saved / "ck")) == []
    # the critic pointed at the actor's (policy) checkpoint, as miles does on resume
    problems = preflight_problems(args_for(saved / "ck", critic_load=str(saved / "ck")))
    assert len(problems) == 1 and "no value head" in problems[0]
    assert str(saved / "ck" / "iter_0000002") in problems[0] and "Fix:" in problems[0]
    args = args_for(saved / "weights_only", critic_load=str(saved / "ck_critic"))
    with pytest.raises(CheckpointIntegrityError, match="no optimizer state"):
        check_or_raise(args)
