"""`EventsTailer`: new complete lines of every *.jsonl file in a directory, files created later included;
a partial last line waits for its newline, a replaced or truncated file is read again from its start."""

from __future__ import annotations

import os
from dataclasses import dataclass

BACKLOG_BYTES = 256 * 1024  # how much of an existing events file is replayed when the agent starts
MAX_READ = 4 * 1024 * 1024  # per file per poll, so one huge file cannot starve the others


@dataclass
class _Tail:
    path: str
    offset: int
    partial: bytes = b""
    inode: int = 0


class EventsTailer:
    """New complete lines of every *.jsonl file in a directory, including files created later."""

    def __init__(self, directory: str, backlog_bytes: int = BACKLOG_BYTES) -> None:
        self.directory = directory
        self.backlog = backlog_bytes
        self.files: dict[str, _Tail] = {}
        self._started = False

    def _discover(self) -> None:
        try:
            names = sorted(n for n in os.listdir(self.directory) if n.endswith(".jsonl"))
        except OSError:
            names = []  # the run dir may not exist yet
        for name in names:
            path = os.path.join(self.directory, name)
            if path in self.files:
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            # Files present at start: replay only their tail. Files that appear later: from the start.
            offset = max(0, st.st_size - self.backlog) if not self._started else 0
            self.files[path] = _Tail(path, offset, b"", st.st_ino)
            if offset > 0:
                self.files[path].partial = b"\0skip"  # drop the first (cut) line
        self._started = True

    def poll(self) -> list[str]:
        self._discover()
        out: list[str] = []
        for tail in self.files.values():
            out.extend(self._read(tail))
        return out

    def _read(self, tail: _Tail) -> list[str]:
        try:
            st = os.stat(tail.path)
        except OSError:
            return []
        if st.st_ino != tail.inode or st.st_size < tail.offset:  # replaced or truncated: start over
            tail.offset, tail.partial, tail.inode = 0, b"", st.st_ino
        if st.st_size == tail.offset:
            return []
        try:
            with open(tail.path, "rb") as f:
                f.seek(tail.offset)
                data = f.read(min(st.st_size - tail.offset, MAX_READ))
        except OSError:
            return []
        tail.offset += len(data)
        chunks = (tail.partial + data).split(b"\n")
        tail.partial = chunks.pop()  # an incomplete last line waits for its newline
        if chunks and chunks[0].startswith(b"\0skip"):
            chunks.pop(0)
        lines = []
        for raw in chunks:
            line = raw.decode("utf-8", "replace").strip()
            if line:
                lines.append(line)
        return lines
