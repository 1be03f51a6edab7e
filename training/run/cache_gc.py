"""Clean a workdir's content cache: remove what no run dir there uses. Sent as the source of `python -S -c`
and run in the workdir (orchestrator/run/cache_clean.py), with training/run/content_cache.py pasted in:
standard library only, Python 3.7+.

Every host's run dir (`runs/<run>/<host>/`) names the code tree and package it was built from
(content_cache.USES_FILE, written before its start reads the cache): those stay, with the cached files
they link, so the runs still there start again warm. Everything else goes: the other trees and
packages, the cached files no kept set links, temporary files whose writer is gone.

Removing never harms a run: a run does not read the cache after its start (its `code/` is a copy, its
`lib/` hard links that outlive the cache's names), and a start holds the cache's lock shared while it
reads the cache; the cleaner holds it exclusively, so it never removes what a start is about to link.
Hosts sharing the workdir may clean at once: the lock takes them one at a time.

Prints one line: `@cleaned <files> <bytes>` (what was freed), `@busy` (a start held the cache all along:
nothing done) or `@error <why>` (also on a filesystem without locks: nothing done, it cannot be safe).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

from .content_cache import HASH, USES_FILE, Busy, Scratch, cache_lock  # inlined when sent

CACHE_DIR = "cache"
SETS = {"tree": "trees", "package": "packages"}  # USES_FILE's keys -> the cache's dirs
LOCK_WAIT_S = 10.0


def used_sets(workdir: str) -> dict[str, set[str]]:
    """{"trees": ids, "packages": ids} named by the run dirs in `workdir/runs/*/*/`."""
    used: dict[str, set[str]] = {d: set() for d in SETS.values()}
    runs = os.path.join(workdir, "runs")
    for run in sorted(os.listdir(runs)) if os.path.isdir(runs) else []:
        with contextlib.suppress(NotADirectoryError, FileNotFoundError):  # purged meanwhile
            for host in os.listdir(os.path.join(runs, run)):
                try:
                    with open(os.path.join(runs, run, host, USES_FILE), "rb") as f:
                        uses = json.loads(f.read())
                except (OSError, ValueError):
                    continue  # not a run dir, or one whose start has not reached the cache yet
                for key, sub in SETS.items():
                    if isinstance(uses, dict) and isinstance(uses.get(key), str):
                        used[sub].add(uses[key])
    return used


class Freed:
    def __init__(self) -> None:
        self.files = 0
        self.bytes = 0

    def unlink(self, path: str) -> None:
        st = os.lstat(path)
        os.unlink(path)
        if st.st_nlink == 1:  # its last name: the space is free now
            self.files += 1
            self.bytes += st.st_size


def clean(workdir: str) -> Freed:
    """Remove, under the cache's exclusive lock, what no run dir of `workdir` uses (raises Busy)."""
    cache = os.path.join(workdir, CACHE_DIR)
    freed = Freed()
    if not os.path.isdir(cache):
        return freed
    with cache_lock(cache, exclusive=True, wait=LOCK_WAIT_S) as locked:
        if not locked:
            raise OSError("no file locks on this filesystem: the cache is left as it is")
        Scratch.remove_stale(cache)
        used = used_sets(workdir)
        kept: set[tuple[int, int]] = set()  # the cached files a kept set links (device, inode)
        for sub, ids in used.items():
            top = os.path.join(cache, sub)
            for name in sorted(os.listdir(top)) if os.path.isdir(top) else []:
                for root, dirs, files in os.walk(os.path.join(top, name), topdown=False):
                    for file in files:
                        path = os.path.join(root, file)
                        if name in ids:
                            st = os.lstat(path)
                            kept.add((st.st_dev, st.st_ino))
                        else:
                            freed.unlink(path)
                    if name not in ids:
                        for d in dirs:
                            os.rmdir(os.path.join(root, d))
                if name not in ids:
                    os.rmdir(os.path.join(top, name))
        for name in sorted(os.listdir(cache)):
            path = os.path.join(cache, name)
            if HASH.match(name):
                st = os.lstat(path)
                if (st.st_dev, st.st_ino) not in kept:
                    freed.unlink(path)
    return freed


def main() -> int:
    os.umask(0o077)
    try:
        freed = clean(os.getcwd())
    except Busy:
        print("@busy", flush=True)
        return 0
    except OSError as exc:
        print(f"@error {type(exc).__name__}: {exc}", flush=True)
        return 1
    print(f"@cleaned {freed.files} {freed.bytes}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
