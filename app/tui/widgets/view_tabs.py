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

    @on(Tabs.TabActivated)
    def _show_pane(self, event: Tabs.TabActivated) -> None:
        event.stop()
        self.show_view(event.tab.id or "")

    def show_view(self, view_id: str) -> None:
        for other in self.view_ids:
            for pane in self.screen.query(f"#pane-{other}"):
                pane.set_class(other == view_id, "-active")
