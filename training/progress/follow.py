"""FileFollower: the new `\\n`- or `\\r`-terminated segments of a file another process appends to. Stdlib only.

A task's stdout and stderr are appended to its log, and progress bars (Keras' with any POSIX stdout)
overwrite their line with `\\b...\\r`, so `\\n`, `\\r` and `\\b` all end a segment. Contract of `read()`:
- returns the complete segments added since the previous call (bytes decoded as UTF-8, bad bytes
  replaced), each without its terminator, empty ones dropped;
- reads at most `max_read` bytes per call: a chatty task cannot make its supervisor's poll slow; when
  more than `max_backlog` bytes are waiting, it jumps to the last `max_read` bytes (`skipped` counts
  what it jumped over: stale lines are worth less than current ones);
- a file replaced (new inode) or truncated is read again from its start; a missing file is no error;
- an incomplete last segment waits for its terminator, except a progress bar's: a segment that began
  after a `\\r` and did not grow for one call is returned once as it is (Keras writes the next `\\r`
  only with its next update, which can be a whole step away), and not again when it completes
  unchanged (the same after a `\\b`). A segment longer than `max_partial` without a terminator is returned cut.
"""

from __future__ import annotations

import os
import re

MAX_READ = 256 * 1024
MAX_PARTIAL = 64 * 1024
_SEGMENT_END = re.compile(rb"[\r\n\b]")


class FileFollower:
    def __init__(self, path: str, *, from_end: bool = False, max_read: int = MAX_READ,
                 max_backlog: int | None = None, max_partial: int = MAX_PARTIAL) -> None:
        self.path = path
        self.max_read = max_read
        self.max_backlog = max_backlog if max_backlog is not None else 16 * max_read
        self.max_partial = max_partial
        self.offset = 0
        self.inode: int | None = None
        self.skipped = 0  # bytes jumped over because the reader fell behind
        self._partial = b""
        self._partial_is_update = False  # the pending segment began after '\r' or '\b' (a progress bar update)
        self._peeked = b""  # the pending segment as already returned by a peek
        self._fd: int | None = None
        if from_end:
            try:
                st = os.stat(path)
                self.offset, self.inode = st.st_size, st.st_ino
            except OSError:
                pass

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> os.stat_result | None:
        """Stat the path; (re)open it when it is new or was replaced. None when it does not exist."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        if self._fd is None or st.st_ino != self.inode:
            self.close()
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except OSError:
                return None
            if self.inode is not None and st.st_ino != self.inode:
                self._restart()
            self.inode = st.st_ino
        if st.st_size < self.offset:  # truncated
            self._restart()
        return st

    def _restart(self) -> None:
        self.offset, self._partial, self._peeked, self._partial_is_update = 0, b"", b"", False

    def read(self) -> list[str]:
        st = self._open()
        if st is None or self._fd is None:
            return []
        waiting = st.st_size - self.offset
        if waiting <= 0:
            return self._peek()
        if waiting > self.max_backlog:
            jump = waiting - self.max_read
            self.skipped += jump
            self.offset += jump
            self._partial, self._peeked, self._partial_is_update = b"", b"", False
            waiting = self.max_read
            data = os.pread(self._fd, waiting, self.offset)
            cut = _SEGMENT_END.search(data)  # the first segment is cut: drop it
            data = data[cut.end():] if cut else b""
            self.offset += waiting
        else:
            data = os.pread(self._fd, min(waiting, self.max_read), self.offset)
            self.offset += len(data)
        return self._split(data)

    def _split(self, data: bytes) -> list[str]:
        """Complete segments of the pending one + data; the rest waits in `_partial`."""
        out: list[str] = []
        buf = self._partial + data
        start = 0
        is_update = self._partial_is_update
        for m in _SEGMENT_END.finditer(buf):
            segment = buf[start:m.start()]
            if segment and not (is_update and segment == self._peeked):
                out.append(_decode(segment))
            self._peeked = b""
            is_update = m.group() != b"\n"
            start = m.end()
        rest = buf[start:]
        if start:
            self._partial_is_update = is_update
        if len(rest) > self.max_partial:
            out.append(_decode(rest))
            rest, self._partial_is_update = b"", False
        self._partial = rest
        return out

    def _peek(self) -> list[str]:
        if self._partial and self._partial_is_update and self._partial != self._peeked:
            self._peeked = self._partial
            return [_decode(self._partial)]
        return []


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")
