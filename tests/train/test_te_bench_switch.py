"""The TE side-by-side bench's switch (bench/gpu_bench.py --layer-spec) and the device script's
TE steps (bench/gpu_device_run.sh), checked here on the CPU."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gpu_bench():  # noqa: ANN201 - the bench script as a module
    spec = importlib.util.spec_from_file_location("gpu_bench", REPO / "bench" / "gpu_bench.py")
    module = importlib.util.module_from_spec(spec)
    with pytest.MonkeyPatch.context() as patch:  # its dataclasses look themselves up there
        patch.setitem(sys.modules, "gpu_bench", module)
        spec.loader.exec_module(module)
    return module


def test_layer_spec_picks_the_rows(gpu_bench) -> None:  # noqa: ANN001
    rows = gpu_bench.train_variants
    local = list(gpu_bench.VARIANTS)
    assert rows(None, None, te_ok=False) == local
    assert rows(None, None, te_ok=True) == [*local, "te"]  # side by side where TE imports
    assert rows(["te"], None, te_ok=False) == ["te"]  # asked for: its rows fail, labelled
    assert rows(["local", "te"], ["sdpa+layers"], te_ok=True) == ["sdpa+layers", "te"]
    assert rows(["local"], ["sdpa"], te_ok=True) == ["sdpa"]


def test_local_rows_keep_te_off_and_the_te_row_turns_it_on(gpu_bench) -> None:  # noqa: ANN001
    assert all(env["PPODECK_TE"] == "0" for env in gpu_bench.VARIANTS.values())
    assert gpu_bench.variant_env("te")["PPODECK_TE"] == "1"
    assert gpu_bench.variant_env("sdpa+layers") is gpu_bench.VARIANTS["sdpa+layers"]


def test_batch_dim_passes_reach_every_train_row(gpu_bench, monkeypatch) -> None:  # noqa: ANN001
    """--batch-dim is repeatable (an A/B/A/B in one run) and each pass runs every train row
    with its batch dim; static by default."""
    ns = gpu_bench.build_parser().parse_args(["--batch-dim", "dynamic", "--batch-dim", "static"])
    assert ns.batch_dim == ["dynamic", "static"]
    assert gpu_bench.build_parser().parse_args([]).batch_dim is None
    with pytest.raises(SystemExit):
        gpu_bench.build_parser().parse_args(["--batch-dim", "varying"])
    calls = []
    monkeypatch.setattr(gpu_bench, "train_throughput",
                        lambda plan, role, variant, res, peak, batch_dim: calls.append(
                            (plan.train_batch, role, variant, batch_dim)))
    plan = gpu_bench.Plan.make(smoke=True)
    gpu_bench.train_rows(plan, ["sdpa+layers"], "dynamic", gpu_bench.Results(), 1.0)
    assert calls == [(batch, role, "sdpa+layers", "dynamic")
                     for batch in (2, 4) for role in ("actor", "critic")]


def test_the_device_scripts_te_bench_arguments_parse(gpu_bench) -> None:  # noqa: ANN001
    script = (REPO / "bench" / "gpu_device_run.sh").read_text()
    call = re.search(r"python3 bench/gpu_bench.py (--only train \\\n\s+[^|]+)\|", script)
    argv = [a for a in call.group(1).replace("\\\n", " ").split() if not a.startswith("2>")]
    ns = gpu_bench.build_parser().parse_args(argv)
    assert ns.layer_spec == ["local", "te"] and ns.only == ["train"]
    assert gpu_bench.train_variants(ns.layer_spec, ns.variant, te_ok=False) == \
        ["sdpa+layers", "te"]
    with pytest.raises(SystemExit):
        gpu_bench.build_parser().parse_args(["--layer-spec", "transformer-engine"])


@pytest.mark.parametrize("script", ["gpu_device_run.sh", "make_te_wheels.sh"])
def test_scripts_parse(script: str) -> None:
    subprocess.run(["bash", "-n", str(REPO / "bench" / script)], check=True)


def test_device_script_has_the_te_steps_its_sequence_names() -> None:
    steps = set(re.findall(r"^    ([a-z0-9.-]+)\)", (REPO / "bench" / "gpu_device_run.sh")
                           .read_text(), re.M))
    header = (REPO / "bench" / "make_te_wheels.sh").read_text().split("set -euo")[0]
    named = set(re.findall(r"gpu_device_run\.sh ((?:te-[a-z]+ ?)+)", header))
    assert named and {s for group in named for s in group.split()} <= steps
