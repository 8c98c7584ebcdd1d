"""Where each model lives now (gpu/cpu), the last offload/onload moves, and device memory."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from ....engine.run.state import Device, Move
from ....engine.vocabulary import MODELS
from .. import fmt

WHERE_STYLE = {"gpu": "bold green", "cpu": "bold yellow"}


def _move_cell(move: Move | None) -> str:
    if move is None:
        return "-"
    if move.noop:
        return f"no-op ({fmt.gb(move.bytes)} stay put)"
    rate = "" if move.gbps is None else f" {move.gbps:.1f} GB/s"
    return f"{fmt.gb(move.bytes)} {fmt.seconds(move.seconds)}{rate}"


def _bar(used: int, total: int, width: int) -> Text:
    filled = 0 if total <= 0 else min(width, round(width * used / total))
    return Text("█" * filled, "green") + Text("░" * (width - filled), "dim")


class OffloadPanel(Static):
    """Attributes down: show() takes the RunState fields; kept for tests and redraws."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.where: dict[str, str] = {}
        self.last_offload: dict[str, Move] = {}
        self.last_onload: dict[str, Move] = {}
        self.devices: tuple[Device, ...] = ()
        self.gpu_label = ""
        self.rss_bytes: int | None = None
        self.move_plan = ""
        self._rows = -1

    def show(self, where: Mapping[str, str], last_offload: Mapping[str, Move],
             last_onload: Mapping[str, Move], devices: tuple[Device, ...], gpu_label: str,
             rss_bytes: int | None, move_plan: str = "") -> None:
        self.where = dict(where)
        self.last_offload = dict(last_offload)
        self.last_onload = dict(last_onload)
        self.devices = devices
        self.gpu_label = gpu_label
        self.rss_bytes = rss_bytes
        self.move_plan = move_plan
        # a new layout only when the number of rows changes (a layout costs the whole screen)
        rows = len(devices)
        parts = [self._models_table(), self._devices_table(), self._host_line()]
        if move_plan:  # the driver's plan: which moves overlap, and why
            parts.insert(1, Text(move_plan, "dim"))
        self.update(Group(*parts), layout=rows != self._rows)
        self._rows = rows

    def on_resize(self) -> None:
        if self.devices:
            self.show(self.where, self.last_offload, self.last_onload, self.devices,
                      self.gpu_label, self.rss_bytes, self.move_plan)

    def _models_table(self) -> Table:
        table = Table(box=None, expand=True, padding=(0, 1), header_style="bold")
        table.add_column("model")
        table.add_column("now")
        table.add_column("last offload")
        table.add_column("last onload")
        for model in MODELS:
            where = self.where.get(model, "?")
            table.add_row(model, Text(where, WHERE_STYLE.get(where, "dim")),
                          _move_cell(self.last_offload.get(model)),
                          _move_cell(self.last_onload.get(model)))
        return table

    def _devices_table(self) -> Table:
        title = f"GPU memory ({self.gpu_label})" if self.gpu_label else "GPU memory"
        table = Table(box=None, expand=True, padding=(0, 1), title=title, title_justify="left",
                      title_style="bold", header_style="bold")
        table.add_column("gpu", width=3)
        table.add_column("used", ratio=1)
        table.add_column("GB", justify="right", no_wrap=True)
        table.add_column("torch", justify="right", no_wrap=True)
        table.add_column("other", justify="right", no_wrap=True)
        if not self.devices:
            table.add_row("-", Text("no gpu events yet", "dim"), "", "", "")
        bar_width = max(8, min(40, self.size.width - 34))  # the bar takes what the numbers leave
        for device in self.devices:
            table.add_row(str(device.index),
                          _bar(device.used_bytes, device.total_bytes, bar_width),
                          f"{device.used_bytes / fmt.GB:.0f}/{device.total_bytes / fmt.GB:.0f}",
                          f"{device.torch_reserved_bytes / fmt.GB:.1f}",
                          f"{device.non_torch_bytes / fmt.GB:.1f}")
        return table

    def _host_line(self) -> Text:
        # "other" = memory the GPU reports in use that torch's allocator does not see
        # (SGLang's pools, NCCL, CUDA context): the part offload debugging usually hunts for.
        return Text.assemble(("host RSS ", "bold"), fmt.gb(self.rss_bytes),
                             ("   other = used - torch reserved", "dim"))
