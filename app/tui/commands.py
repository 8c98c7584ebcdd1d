"""Command palette entries: open preset, launch, attach, export, stop run (and a few more)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

Command = tuple[str, Callable[[], object], str]


class DeckCommands(Provider):
    async def startup(self) -> None:
        self._presets: list[str] = []
        self._runs: list[tuple[str, str, str]] = []
        # file system reads off the event loop
        self._presets, self._runs = await asyncio.to_thread(_scan)

    def _commands(self) -> list[Command]:
        app = self.app
        screen = partial(app.action_screen)  # type: ignore[attr-defined]
        commands: list[Command] = [
            ("Open preset…", app.action_open_presets,  # type: ignore[attr-defined]
             "Pick a built-in, user or team preset"),
            ("Launch", partial(screen, "launch"), "Launch the edited config (editor only)"),
            ("Attach to run…", app.action_open_runs,  # type: ignore[attr-defined]
             "List running and finished runs"),
            ("Export config…", partial(screen, "export"), "Write the config as TOML or argv"),
            ("Save as preset…", partial(screen, "save_preset"), "Save edits as a user preset"),
            ("Stop run", partial(screen, "stop_run"), "Stop the run shown in the monitor"),
            ("Discard edits", partial(screen, "revert_all"), "Back to the preset's values"),
            ("New config from defaults", partial(app.open_editor, None),  # type: ignore[attr-defined]
             "Open the editor with no preset"),
        ]
        commands += [(f"Open preset: {name}", partial(app.open_editor, name),  # type: ignore[attr-defined]
                      "Open this preset in the flag editor") for name in self._presets]
        commands += [(f"Attach: {run_id} ({state})", partial(app.attach, path),  # type: ignore[attr-defined]
                      "Open the run monitor") for run_id, state, path in self._runs]
        return commands

    async def discover(self) -> Hits:
        for name, callback, help_text in self._commands()[:8]:
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, callback, help_text in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)


def _scan() -> tuple[list[str], list[tuple[str, str, str]]]:
    from ...engine.presets import list_presets
    from ...engine.run.rundir import list_runs

    presets: list[str] = []
    runs: list[tuple[str, str, str]] = []
    try:
        presets = [preset.name for preset in list_presets()]
    except Exception:
        pass  # the picker shows preset errors; the palette just has fewer entries
    try:
        runs = [(run.id, run.state, str(run.path)) for run in list_runs()[:30]]
    except OSError:
        pass
    return presets, runs
