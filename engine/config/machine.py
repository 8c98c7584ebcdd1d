"""Machine: what the machine that will run a config offers, as check() takes it (PURE).

engine/config/rules_engine.py probes it (`this_machine`, `current_machine`; its environment
comes from the edge); the rules that judge a config against it (rules_engine, rules_memory,
the forecast) take it as an argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .forecast import Calibration

if TYPE_CHECKING:
    from ..host.memory import Holdings


@dataclass(frozen=True)
class Machine:
    """What the machine that will run the driver offers, as far as a config can depend on it."""

    gpus: int  # visible GPUs (CUDA_VISIBLE_DEVICES respected)
    transformer_engine: bool  # importable
    sglang: bool  # importable
    host_memory_bytes: int | None = None  # MemTotal of /proc/meminfo; None: unknown
    megatron_bridge: bool = False  # importable (`--megatron-to-hf-mode bridge`)
    # what the GPUs and the host hold now (engine/host/memory.py); None: not read
    holdings: Holdings | None = None
    kind: str = ""  # engine/host/kind.py: the forecast is calibrated per machine kind
    calibrations: tuple[Calibration, ...] = ()  # kept runs' timings (engine/config/forecast.py)
    load: float | None = None  # 1-min load average when probed for a forecast (engine/run/pace)
    cpus: int | None = None
    # MILES_EXPERIMENTAL_FT_TRAINER on in the environment miles' train.py inherits (a local
    # `--engine miles` launch hands it this process's environment; engine/miles/drive.py)
    miles_ft_trainer: bool = False
    # the environment the run starts in (RAY_ADDRESS, PPODECK_HOME, PPODECK_CODE_DIR,
    # PPODECK_DECODE): read at the edge (engine/host/machine.py's environment()), so the config
    # layer reads none itself; named, never defaulted, so no builder forgets it
    env: Mapping[str, str] = field(kw_only=True, hash=False)

    @property
    def cuda(self) -> bool:
        return self.gpus > 0
