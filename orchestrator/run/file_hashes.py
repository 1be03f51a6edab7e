"""Content hashes of the files `start` ships, remembered between starts: a file whose path, device, inode,
size and mtime are unchanged is not read again (a 2 GB data file in `[training] sync` costs its
SHA-256, ~1.3 s here, once, not at every start).

One JSON file beside the run records (`records.state_dir()`'s parent, so `TFCLUSTER_STATE_DIR` moves it
too), private (0600), written whole to a temporary name and renamed: two starts at once each keep a
complete file (the last one's). Only what the last start shipped is kept, so it never grows beyond one
sync set. A damaged or foreign file is ignored (everything is hashed again).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from orchestrator.run import records

VERSION = 1
Key = tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns


def _path() -> Path:
    return records.state_dir().parent / "file-hashes.json"


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class FileHashes:
    """`sha256(path)` from the remembered table when the file is unchanged; `save()` keeps this start's."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[Key, str]] = {}
        self._used: dict[str, tuple[Key, str]] = {}
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            data = json.loads(_path().read_text(encoding="utf-8"))
            if data.get("version") == VERSION:
                self._known = {p: (tuple(v[:4]), str(v[4])) for p, v in data["files"].items()}

    def sha256(self, path: str, st: os.stat_result) -> str:
        key: Key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        known = self._known.get(path)
        sha = known[1] if known is not None and known[0] == key else sha256_of(path)
        self._used[path] = (key, sha)
        return sha

    def save(self) -> None:
        path = _path()
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
            data = {"version": VERSION, "files": {p: [*key, sha] for p, (key, sha) in self._used.items()}}
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, separators=(",", ":"))
            os.replace(tmp, path)
