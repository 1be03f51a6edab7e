"""`file_stamp(path)`: what tells a file replaced since the last look (its inode and its modification time in
ns), None when it cannot be read. run.json is replaced, never edited (a new file renamed over it): a new
inode, or a new mtime where the filesystem reuses inodes. Read once a second by the supervisor
(training/supervisor/resize.py) and by every ps task (training/cluster/ps.py): one stat. Stdlib only."""

from __future__ import annotations

import os


def file_stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns
