"""Text for the dashboard's cells: rates, bytes, ages, sparklines. Pure functions, no Textual."""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.text import Text

BARS = "▁▂▃▄▅▆▇█"
# A state is always shown as a word; the glyph and colour only help the eye.
GLYPHS = {"running": "●", "stalled": "◐", "starting": "◌", "restarting": "↻", "exited": "✖", "unreachable": "?",
          "lost": "⊘", "not-started": "·"}
STATE_STYLE = {
    "running": "green", "stalled": "yellow", "starting": "cyan", "restarting": "magenta",
    "exited": "red", "unreachable": "bright_black", "lost": "bold red", "not-started": "bright_black",
}
STOPPED_GLYPH, STOPPED_STYLE = "■", "blue"  # exited because the user stopped it for good


def state_word(state: str, exit_code: int | None = None, held: bool = False, reason: str | None = None) -> str:
    """`exited 3` with its code; `stopped` when the user stopped the task for good (not a failure);
    `restarting: group` when it restarts with its multi-worker-mirrored group."""
    if state == "exited" and held:
        return "stopped"
    if state == "restarting" and reason == "group":
        return "restarting: group"
    return state if state != "exited" or exit_code is None else f"exited {exit_code}"


def state_text(state: str, exit_code: int | None = None, held: bool = False, reason: str | None = None) -> Text:
    word = state_word(state, exit_code, held, reason)
    if word == "stopped":
        return Text(f"{STOPPED_GLYPH} {word}", style=STOPPED_STYLE)
    return Text(f"{GLYPHS.get(state, ' ')} {word}", style=STATE_STYLE.get(state, ""))


def rate(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "-"
    if x >= 10_000:
        return f"{x / 1000:.0f}k"
    if x >= 1000:
        return f"{x / 1000:.1f}k"
    return f"{x:.{digits}f}"


def byte_size(x: float) -> str:
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if x >= div:
            return f"{x / div:.1f} {unit}"
    return f"{x:.0f} B"


def byte_rate(x: float | None) -> str:
    return "-" if x is None else f"{byte_size(x)}/s"


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.0f}h"


def sparkline(values: Sequence[float]) -> str:
    top = max(values, default=0.0)
    if top <= 0:
        return " " * len(values)
    return "".join(BARS[min(int(v / top * (len(BARS) - 1) + 0.5), len(BARS) - 1)] if v > 0 else " " for v in values)


def clock(t: float) -> str:
    """HH:MM:SS in UTC: the same text on every machine (and in every snapshot) for the same time."""
    return time.strftime("%H:%M:%S", time.gmtime(t))


def number(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def byte_rate_short(x: float | None) -> str:
    """At most 5 characters: 512B, 12k, 1.2M, 3.4G (per second implied by the column)."""
    if x is None:
        return "-"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= div:
            v = x / div
            return f"{v:.1f}{unit}" if v < 10 else f"{v:.0f}{unit}"
    return f"{x:.0f}B"
