"""engine.host_memory: the offloaded train state against the RAM of the machine check() sees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ppodeck.engine.config import check
from ppodeck.engine.config.machine import Machine
from ppodeck.engine.host.machine import meminfo_total
from ppodeck.engine.presets import load_preset, resolve_preset

from .conftest import CPU_MACHINE

H200_HOST = Machine(gpus=1, transformer_engine=False, sglang=False, host_memory_bytes=128 << 30,
                    env=os.environ)
QWEN3_4B = {"num_layers": 36, "hidden_size": 2560, "ffn_hidden_size": 9728,
            "num_attention_heads": 32, "num_query_groups": 8}


def one_gpu_preset(**changes: object):  # noqa: ANN201
    config = resolve_preset(load_preset("qwen3-1.7b-ppo-1gpu"))
    return config.with_values(**changes) if changes else config


def test_qwen3_4b_offloaded_on_one_h200_host_does_not_fit() -> None:
    report = check(one_gpu_preset(**QWEN3_4B), H200_HOST)
    (issue,) = [i for i in report.errors if i.code == "engine.host_memory"]
    # actor 18 B/param (params, master, Adam, ref + swap copies), critic 14 B, rollout 2 B
    assert "127.4 GiB in pinned host memory" in issue.message
    assert "actor 67.4, critic 52.4, rollout 7.5" in issue.message
    assert "128 GiB of RAM" in issue.message and "--offload-train off" in issue.fix


def test_the_1_7b_preset_is_tight_on_a_smaller_host() -> None:
    """54.5 GiB pinned fits 0.9 x 80 GiB; with the processes measured on the H200 host
    (3 workers x 11.8 GiB) it may not: a warning, not an error."""
    machine = Machine(1, False, False, host_memory_bytes=80 << 30, env=os.environ)
    report = check(one_gpu_preset(), machine)
    assert "engine.host_memory" not in report.codes()
    (issue,) = [i for i in report.warnings if i.code == "engine.host_memory_tight"]
    assert "54.5 GiB in pinned host memory" in issue.message
    assert "up to 35 GiB" in issue.message and "80 GiB of RAM" in issue.message


def test_the_1_7b_preset_fits_and_offload_off_never_asks() -> None:
    assert "engine.host_memory" not in check(one_gpu_preset(), H200_HOST).codes()
    off = one_gpu_preset(offload_train=False, **QWEN3_4B)
    assert "engine.host_memory" not in check(off, H200_HOST).codes()


@pytest.mark.parametrize("machine", [CPU_MACHINE, Machine(1, False, False, env=os.environ)],
                         ids=["cpu: nothing pinned", "unknown RAM"])
def test_silent_where_it_cannot_judge(machine: Machine) -> None:
    assert "engine.host_memory" not in check(one_gpu_preset(**QWEN3_4B), machine).codes()


def test_meminfo_total_parses_kib(tmp_path: Path) -> None:
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       131072000 kB\nMemFree:  1 kB\n")
    assert meminfo_total(info) == 131072000 * 1024
    assert meminfo_total(tmp_path / "missing") is None
    info.write_text("MemFree: 1 kB\n")
    assert meminfo_total(info) is None
