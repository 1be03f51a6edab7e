"""Each task's log kept under `[training] max_log_mb` (issue 33 #8: a task printing 20 MB/s grew its log to
629 MB in 30 s), one older part kept as `<log>.1`.

The tasks write their logs themselves, as always (O_APPEND): their output and the supervisor's
`--- tfcluster:` notes stay in order, a task's last lines are in its file when it exits (the supervisor
reads its exit reason there at once), and a task keeps its log when the supervisor dies. The supervisor
looks at each log's size once per turn of its loop (`LogCap.check`); one past the cap is rotated as
logrotate's copytruncate does: its bytes copied to `<log>.1` (the part before that is dropped), then the
file truncated to zero, where the writers' O_APPEND writes continue; a note at the top of the new part
says where the older lines went. So `logs` (the newest lines) and `logs -f` (tail -F sees the
truncation) keep working. Limits, as copytruncate's: what a task writes between the end of the copy and
the truncation (one system call apart) is lost, and a log may pass the cap by what its task writes in
one turn of the loop before it is rotated. Stdlib only.
"""

from __future__ import annotations

import contextlib
import os

from . import notes

COPY_CHUNK = 1 << 20


def rotate(path: str, cap: int) -> bool:
    """Rotate `path` when it is past `cap` bytes; True when it did."""
    try:
        if os.stat(path).st_size <= cap:
            return False
        src = os.open(path, os.O_RDWR)
    except OSError:  # not there yet (a task not started), or gone with its run dir
        return False
    older = path + ".1"
    part = f"{older}.tmp-{os.getpid()}"  # never seen half-written under the name readers look for
    try:
        dst = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            while os.sendfile(dst, src, None, COPY_CHUNK):  # to the end, as it is now: what was just written too
                pass
            os.ftruncate(src, 0)  # at once after the copy: the bytes lost are those of the gap in between
        finally:
            os.close(dst)
        os.replace(part, older)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(part)
        return False
    finally:
        os.close(src)
    with open(path, "ab") as log:
        log.write(notes.line(notes.log_rotated(os.path.basename(older), cap / 2**20)))
    return True


class LogCap:
    """The cap for this host's task logs; `check` once per turn of the supervisor's loop."""

    def __init__(self, paths: list[str], max_log_mb: float) -> None:
        self.paths = paths
        self.cap = max(int(max_log_mb * 2**20), 1)

    def check(self) -> list[str]:
        """Rotate the logs past the cap; returns them."""
        return [p for p in self.paths if rotate(p, self.cap)]
