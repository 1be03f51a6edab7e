"""`x` on a worker of a run that can be resized: stop it for good, or remove it from the run.

The choice (StopOrRemoveScreen: Escape and the focused Cancel do nothing), then for "remove" the usual
yes/no question listing what the resize does (tui/task_actions.py removal_question), then the resize in a
worker thread (the `actions` group, as the other task actions run): it takes seconds and reaches every host.
Its outcome (what changed), or why it could not be done, goes to the event log and a notification. The
dashboard then shows the run's new shape by itself: its source follows the run's record
(orchestrator/monitor/reshape.py), so the removed worker's row goes at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, RichLog

from tui import format as fmt
from tui.screens.confirm import ConfirmScreen
from tui.task_actions import WorkerRemoval, removal_question

Choice = Literal["stop", "remove"]


class StopOrRemoveScreen(ModalScreen[Choice | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "choose('stop')", "Stop"), Binding("r", "choose('remove')", "Remove"),
        Binding("escape", "choose(None)", "Cancel")]

    def __init__(self, name: str) -> None:
        super().__init__()
        self.task_name = name

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Label(f"{self.task_name}: stop it for good, or remove it from the run (a resize)?", id="question")
            with Horizontal(id="confirm-buttons"):
                yield Button("Stop (s)", id="stop", variant="warning")
                yield Button("Remove from run (r)", id="remove", variant="error")
                yield Button("Cancel", id="cancel", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        choices: dict[str | None, Choice] = {"stop": "stop", "remove": "remove"}
        self.dismiss(choices.get(event.button.id))

    def action_choose(self, choice: Choice | None) -> None:
        self.dismiss(choice)


def offer_stop_or_remove(app: App[Any], name: str, removal: WorkerRemoval, stop: Callable[[], None]) -> None:
    """Ask; `stop` is the dashboard's own stop-for-good (its question and all)."""

    def chosen(choice: Choice | None) -> None:
        if choice == "stop":
            stop()
        elif choice == "remove":
            _confirm_removal(app, name, removal)

    app.push_screen(StopOrRemoveScreen(name), chosen)


def _confirm_removal(app: App[Any], name: str, removal: WorkerRemoval) -> None:
    try:
        lines = removal.preview(name)
    except Exception as exc:  # refused (the run changed meanwhile, or cannot be resized): said, never fatal
        _said(app, f"remove {name}: {exc}", error=True)
        return

    def run() -> None:
        try:
            said = removal.remove(name)
            app.call_from_thread(_said, app, said, False)
        except Exception as exc:
            app.call_from_thread(_said, app, f"remove {name} failed: {exc}", True)

    def answered(yes: bool | None) -> None:
        if yes:
            _said(app, f"removing {name} from the run...", False)
            app.run_worker(run, thread=True, group="actions")

    app.push_screen(ConfirmScreen(removal_question(name, lines)), answered)


def _said(app: App[Any], text: str, error: bool) -> None:
    """In the event log (the dashboard's screen, whichever is in front) and as a notification."""
    app.notify(text, severity="error" if error else "information")
    for log in app.screen_stack[0].query("#log").results(RichLog):
        log.write(Text(f"{fmt.clock(time.time())} {text}", style="red" if error else "cyan"))
