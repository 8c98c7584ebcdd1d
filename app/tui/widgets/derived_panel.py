"""Values derived from the config: topology, batch arithmetic, per-GPU memory per phase."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from ....engine.vocabulary import PHASE_LABEL

if TYPE_CHECKING:
    from ....engine.config import Derived

ROWS = (("world_size", "world size"), ("dp_size", "DP"),
        ("rollout_num_gpus", "rollout GPUs"), ("rollout_engines", "rollout engines"),
        ("gpus_needed", "GPUs needed"), ("params", "parameters"),
        ("samples_per_rollout", "samples/rollout"), ("samples_trimmed", "trimmed"),
        ("actor_steps_per_rollout", "actor steps/rollout"),
        ("critic_steps_per_rollout", "critic steps/rollout"),
        ("total_train_iters", "train iterations"))
GPU_ROWS = ("rollout_num_gpus", "gpus_needed")


def _cell(value: Any) -> str:
    if value is None:
        return "?"
    if isinstance(value, int) and value >= 1_000_000:
        return f"{value / 1e9:.2f} B" if value >= 1e9 else f"{value / 1e6:.1f} M"
    return str(value)


def _gib(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}"


class DerivedPanel(Static):
    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.derived: Derived | None = None

    def show(self, derived: Derived) -> None:
        if derived == self.derived:
            return
        # the rows are fixed; the height changes only the first time and when the memory
        # table appears or goes (model shape completed or broken)
        relayout = self.derived is None or (
            bool(self.derived.memory_gib) != bool(derived.memory_gib)) or (
            (self.derived.host_memory_gib is None) != (derived.host_memory_gib is None))
        self.derived = derived
        self.update(Group(self._numbers(derived), self._memory(derived)), layout=relayout)

    @staticmethod
    def _numbers(derived: Derived) -> Table:
        """Two label/value pairs per row: the panel shares its column with issues and argv."""
        table = Table(box=None, show_header=False, expand=True, padding=(0, 1))
        for _ in range(2):
            table.add_column("what", ratio=1, no_wrap=True)
            table.add_column("value", justify="right", style="bold", no_wrap=True)
        on_cpu = derived.host_memory_gib is not None  # a CPU run: no GPU figures
        cells = [(label, _cell(getattr(derived, attr))) for attr, label in ROWS
                 if hasattr(derived, attr) and not (on_cpu and attr in GPU_ROWS)]
        for i in range(0, len(cells), 2):
            left, right = cells[i], cells[i + 1] if i + 1 < len(cells) else ("", "")
            table.add_row(*left, *right)
        return table

    @staticmethod
    def _memory(derived: Derived) -> Table | Text:
        host = derived.host_memory_gib
        if host is not None:
            parts = ", ".join(f"{part} {_gib(host.get(part))}"
                              for part in ("actor", "critic", "rollout", "processes"))
            seen = (f" of {_gib(host['available'])} available" if "available" in host else "")
            return Text(f"host memory, CPU run (GiB, estimate): {_gib(host.get('total'))}"
                        f"{seen} ({parts})")
        memory = derived.memory_gib or {}
        if not memory:
            return Text("memory estimate: needs the model shape flags", "dim")
        table = Table(box=None, expand=True, padding=(0, 1), title="GiB per GPU (estimate)",
                      title_justify="left", title_style="bold", header_style="bold")
        roles = ("actor", "critic", "rollout", "total")
        table.add_column("phase", ratio=1)
        for role in roles:
            table.add_column(role, justify="right")
        for phase, values in memory.items():
            table.add_row(PHASE_LABEL.get(phase, phase),
                          *(_gib(values.get(role)) for role in roles))
        return table
