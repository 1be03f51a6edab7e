"""The event log: the reducer's log lines (exits, restarts, recoveries, stalls, hosts lost and back),
each written once, with its UTC time and a colour by kind."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import RichLog

from tui import format as fmt
from tui.messages import StateUpdated

LOG_STYLE = {"exit": "red", "restart": "magenta", "recover": "green", "stall": "yellow",
             "host-lost": "bold red", "host-back": "green"}


class EventLog(RichLog):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, min_width=20, max_lines=300, wrap=False)
        self._seen = 0  # how many log entries the state had produced when last shown

    def on_mount(self) -> None:
        self.border_title = "events"

    def on_state_updated(self, message: StateUpdated) -> None:
        with message.measured():
            st = message.state
            new = st.log_total - self._seen
            if new <= 0:
                return
            for e in list(st.log)[-min(new, len(st.log)):]:
                line = Text(f"{fmt.clock(e.t)} ")
                line.append(e.text, style=LOG_STYLE.get(e.kind, ""))
                self.write(line)
            self._seen = st.log_total
