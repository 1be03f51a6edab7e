"""The host's content cache, `<workdir>/cache/`, as training/launcher.py keeps it (pasted into the
launcher's source when it is sent, orchestrator/run/inline_source.py: standard library only, Python 3.7+).

- `<sha256>`: every file ever shipped, named by its content, with the fixed mtime CACHED_MTIME: a program
  that rewrites one in place (run dirs hold hard links to them) changes that mtime, so `intact` tells.
- `trees/<id>/`, `packages/<id>/`: a user's code tree, tfcluster's package (byte-compiled once), hard
  links into the cache; a run's `code/` and `lib/` are hard links to them.
- Hosts sharing one workdir (NFS) share the cache: everything is written to a unique temporary name
  (Scratch: the host, the pid and a random token) and renamed into place, so nobody ever sees a partial
  file; a tree another host published first is used as it is; a damaged one is set aside and rebuilt.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any, BinaryIO

HASH = re.compile(r"^[0-9a-f]{64}$")
CACHED_MTIME = 1_000_000_000  # every cached file's mtime (2001-09-09): any write to one changes it
CHUNK = 1 << 20


class Refused(Exception):
    """Something the host cannot do; reported as `@error` (exit 1)."""


class Aborted(Exception):
    """The orchestrator went away or said abort, or a signal came: nothing starts here."""


class Scratch:
    """Unique temporary names in the shared cache (hosts sharing a workdir never collide), and the ones
    this process has not renamed into place yet, removed when it ends early."""

    def __init__(self, cache: str, host: str) -> None:
        self.prefix = os.path.join(cache, f".tmp-{host}-{os.getpid()}-{os.urandom(4).hex()}-")
        self.count = 0
        self.open: set[str] = set()

    @staticmethod
    def remove_stale(cache: str, host: str) -> None:
        """Temporary files of this host's earlier start commands that were killed (SIGKILL leaves no time
        to clean up); another host's, or a live command's, are left alone."""
        mine = f".tmp-{host}-"
        for name in os.listdir(cache):
            pid = name[len(mine):].split("-")[0]
            if not name.startswith(mine) or not pid.isdigit():
                continue
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                path = os.path.join(cache, name)
                shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.unlink(path)
            except OSError:
                pass  # alive (another user's process has that pid): not ours to judge

    def name(self) -> str:
        self.count += 1
        path = f"{self.prefix}{self.count}"
        self.open.add(path)
        return path

    def done(self, path: str) -> None:
        self.open.discard(path)

    def remove_all(self) -> None:
        for path in list(self.open):
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.lexists(path):
                os.unlink(path)
            self.open.discard(path)


def publish(tmp: str, final: str, scratch: Scratch) -> None:
    """Rename a finished file or tree into place; another host may have published the same meanwhile: keep theirs."""
    try:
        os.rename(tmp, final)
    except OSError:
        if not os.path.exists(final):
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    scratch.done(tmp)


def write_atomic(path: str, data: bytes, scratch: Scratch) -> None:
    tmp = scratch.name()
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    scratch.done(tmp)


def intact(path: str) -> bool:
    st = os.lstat(path)
    return st.st_mtime_ns == CACHED_MTIME * 10**9 and not os.path.islink(path)


def receive_blob(stdin: BinaryIO, header: bytes, cache: str, scratch: Scratch) -> str:
    """One `blob <sha> <mode> <size>` frame, streamed into the cache under its hash."""
    words = header.decode("ascii", "replace").split()
    if len(words) != 4 or words[0] != "blob" or not HASH.match(words[1]) or not words[3].isdigit():
        raise Refused(f"expected a blob frame, got {header[:80]!r}")
    sha, mode, left = words[1], int(words[2], 8) & 0o700, int(words[3])
    tmp = scratch.name()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        while left:
            chunk = stdin.read(min(CHUNK, left))
            if not chunk:
                raise Aborted()
            out.write(chunk)
            left -= len(chunk)
    trailer = stdin.readline()
    if trailer != b"ok\n":
        if not trailer:
            raise Aborted()
        raise Refused(f"a synced file changed while it was shipped ({sha[:12]}): nothing kept")
    os.chmod(tmp, mode | 0o400)
    os.utime(tmp, (CACHED_MTIME, CACHED_MTIME))
    publish(tmp, os.path.join(cache, sha), scratch)
    return sha


def link_tree(src: str, dst: str) -> bool:
    """`cp -al src/. dst/` (copies where links are impossible); False, with dst removed, when src is missing
    or a file of it is not intact (changed in place by a run since it was cached), or src went away while it
    was linked (another host set it aside: damaged)."""
    try:
        if not os.path.isdir(src):
            return False
        for root, _dirs, files in os.walk(src):
            target = os.path.join(dst, os.path.relpath(root, src))
            os.makedirs(target, exist_ok=True)
            for name in files:
                source, dest = os.path.join(root, name), os.path.join(target, name)
                if not intact(source):
                    raise FileNotFoundError(source)
                if os.path.lexists(dest):
                    os.unlink(dest)
                try:
                    os.link(source, dest)
                except OSError:
                    shutil.copy2(source, dest)
    except FileNotFoundError:
        shutil.rmtree(dst, ignore_errors=True)
        return False
    return True


def build(cache: str, final: str, files: list[list[Any]], scratch: Scratch, compile_it: bool) -> None:
    """cache/trees/<id> or cache/packages/<id> from hard links into the cache (byte-compiled once, for the
    package: the sources keep their fixed mtime in every run, so the .pyc files stay valid)."""
    building = scratch.name()
    os.makedirs(building)
    for rel, sha, _mode in files:
        if not HASH.match(sha) or rel.startswith("/") or ".." in rel.split("/") or not rel:
            raise Refused(f"bad manifest entry {rel!r}")
        path = os.path.join(building, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            os.link(os.path.join(cache, sha), path)
        except OSError:
            shutil.copy2(os.path.join(cache, sha), path)  # keeps the fixed mtime
    if compile_it:
        import compileall

        compileall.compile_dir(building, quiet=1)  # best effort
        for root, _dirs, names in os.walk(building):
            for name in names:
                if name.endswith(".pyc"):
                    os.utime(os.path.join(root, name), (CACHED_MTIME, CACHED_MTIME))
    os.makedirs(os.path.dirname(final), exist_ok=True)
    publish(building, final, scratch)


def place(cache: str, final: str, dest: str, files: list[list[Any]], scratch: Scratch, compile_it: bool) -> None:
    """Link `final` into `dest`, building it first when it is not there (another host sharing this cache may
    have built it meanwhile: then theirs is used) or setting it aside when it is damaged."""
    for _attempt in range(3):
        if link_tree(final, dest):
            return
        if os.path.isdir(final):  # damaged (changed in place by a run): set aside, removed at the end
            with contextlib.suppress(FileNotFoundError):  # another host set it aside first
                os.rename(final, scratch.name())
        build(cache, final, files, scratch, compile_it)
    raise Refused(f"{final} keeps changing while it is linked (a run rewriting its synced files?)")


def missing(cache: str, files: list[list[Any]]) -> list[str]:
    """The hashes the cache lacks; a cached file changed in place is dropped (its name only: a run that
    holds it keeps its copy) and counts as lacking."""
    need: list[str] = []
    for _rel, sha, _mode in files:
        path = os.path.join(cache, sha)
        if sha in need or not HASH.match(sha):
            continue
        if os.path.isfile(path) and not intact(path):
            os.unlink(path)
        if not os.path.isfile(path):
            need.append(sha)
    return need
