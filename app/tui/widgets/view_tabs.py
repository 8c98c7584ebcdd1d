"""Tabs that show one pane at a time on small terminals (the screen toggles `-compact`).

Panes are any widgets with id `pane-<tab id>` and class `pane` on the same screen; the CSS in
app.tcss hides non-active panes only under `.-compact`, so wide layouts show every pane.
"""

from __future__ import annotations

from textual import on
from textual.widgets import Tab, Tabs


class ViewTabs(Tabs):
    def __init__(self, *views: tuple[str, str], **kwargs: object) -> None:
        super().__init__(*(Tab(label, id=view_id) for view_id, label in views),
                         **kwargs)  # type: ignore[arg-type]
        self.view_ids = [view_id for view_id, _ in views]
        self._labels: dict[str, str] = {}

    def set_label(self, view_id: str, label: str) -> None:
        """A tab's label, kept and applied once the tab is mounted: the screen's first check
        can finish before the tabs' children mount."""
        self._labels[view_id] = label
        self._apply_labels()

    def on_mount(self) -> None:
        self.call_after_refresh(self._apply_labels)

    def _apply_labels(self) -> None:
        for view_id, label in self._labels.items():
            tab = self.get_tab(view_id)
            if tab is not None and str(tab.label) != label:
                tab.label = label

    @on(Tabs.TabActivated)
    def _show_pane(self, event: Tabs.TabActivated) -> None:
        event.stop()
        self.show_view(event.tab.id or "")

    def show_view(self, view_id: str) -> None:
        for other in self.view_ids:
            for pane in self.screen.query(f"#pane-{other}"):
                pane.set_class(other == view_id, "-active")
