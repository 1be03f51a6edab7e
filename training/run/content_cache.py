"""The host's content cache, `<workdir>/cache/`, as training/launcher.py keeps it (pasted into the
launcher's source when it is sent, orchestrator/run/inline_source.py: standard library only, Python 3.7+).

- `<sha256>`: every file ever shipped, named by its content, with the fixed mtime CACHED_MTIME: a program
  that rewrites one in place (through a hard link) changes that mtime, so `intact` tells.
- `trees/<id>/`, `packages/<id>/`: a user's code tree, tfcluster's package (byte-compiled once), hard
  links into the cache. A run's `lib/` is hard links to its package; its `code/` is a private copy of
  its tree (training/run/file_clone.py: a reflink where the filesystem can), so what one host's tasks
  write there is never what another host's tasks read, and the cache stays as shipped.
- Hosts sharing one workdir (NFS) share the cache: everything is written to a unique temporary name
  (Scratch) and renamed into place, so nobody ever sees a partial file; a tree another host published
  first is used as it is; a damaged one is set aside and rebuilt.
- A start holds `.lock` shared while it reads and fills the cache, and names what it uses in its run
  dir (USES_FILE); the cleaner (training/run/cache_gc.py) holds it exclusively, so it never removes
  what a start is about to link.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any, BinaryIO

HASH = re.compile(r"^[0-9a-f]{64}$")
CACHED_MTIME = 1_000_000_000  # every cached file's mtime (2001-09-09): any write to one changes it
CHUNK = 1 << 20
LOCK = ".lock"  # in the cache: shared by starts while they use it, exclusive for the cleaner
USES_FILE = "cache-uses.json"  # in a host's run dir: {"tree": id, "package": id}, what the run was built from
# A writer's temporary names: `<stem>.lock` (held locked by the writer for its life) and `<stem>-<n>`; the
# stem names the machine (MACHINE_KEY), the pid and a random token, every field of a fixed form.
TEMP = re.compile(r"^(\.tmp-([0-9a-f]{12})-([0-9]+)-[0-9a-f]{8})(-[0-9]+|\.lock)$")
NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP)  # a filesystem without file locks


class Refused(Exception):
    """Something the host cannot do; reported as `@error` (exit 1)."""


class Aborted(Exception):
    """The orchestrator went away or said abort, or a signal came: nothing starts here."""


def machine_key() -> str:
    """This machine in this boot (machine id, boot id and host name): only a pid with this key in its
    name may be judged by looking at this machine's processes."""
    import hashlib

    parts = [os.uname().nodename]
    for path in ("/etc/machine-id", "/proc/sys/kernel/random/boot_id"):
        try:
            with open(path) as f:
                parts.append(f.read().strip())
        except OSError:
            parts.append("")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # another user's process has that pid
    return True


def _lock(fd: int, exclusive: bool = True) -> bool | None:
    """Try to lock fd: True, False (someone holds it) or None (this filesystem has no locks)."""
    import fcntl

    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in NO_LOCKS:
            return None
        raise
    return True


def _same_file(fd: int, path: str) -> bool:
    """fd is still the file at `path` (a lock file removed and made again while it was locked is not)."""
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


class Scratch:
    """Unique temporary names in the shared cache, owned without doubt by this process: it holds the lock
    of `<stem>.lock` for its life (the kernel, or the NFS lock manager, drops it when the process dies,
    wherever it ran), and the ones it has not renamed into place yet are removed when it ends early."""

    def __init__(self, cache: str) -> None:
        machine = machine_key()
        while True:
            stem = os.path.join(cache, f".tmp-{machine}-{os.getpid()}-{os.urandom(4).hex()}")
            fd = os.open(stem + ".lock", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            # a cleaner may have taken it between the create and the lock: then it is going, pick another
            if _lock(fd) is not False and _same_file(fd, stem + ".lock"):
                break
            os.close(fd)
        self.lock_fd: int | None = fd
        self.stem = stem
        self.count = 0
        self.open: set[str] = set()

    @staticmethod
    def remove_stale(cache: str) -> None:
        """Temporary files of writers that are gone (a SIGKILL leaves no time to clean up), whichever host
        sharing this cache they ran on: a lock we can take is a writer that is gone; a live one, here or on
        another machine, holds its lock. Where the filesystem has no locks, only this machine's own dead
        pids are judged (the machine key in the name matches exactly)."""
        names = os.listdir(cache)
        for name in names:
            match = TEMP.match(name)
            if not match or match.group(4) != ".lock":
                continue
            stem, path = match.group(1), os.path.join(cache, name)
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                continue  # another cleaner took it meanwhile
            try:
                got = _lock(fd)
                gone = (got and _same_file(fd, path)) or (
                    got is None and match.group(2) == machine_key() and not _alive(int(match.group(3))))
                if not gone:
                    continue
                for other in names:  # its temporary files, while we hold its lock
                    owned = TEMP.match(other)
                    if owned and owned.group(1) == stem and owned.group(4) != ".lock":
                        _remove(os.path.join(cache, other))
                _remove(path)
            finally:
                os.close(fd)

    def name(self) -> str:
        self.count += 1
        path = f"{self.stem}-{self.count}"
        self.open.add(path)
        return path

    def done(self, path: str) -> None:
        self.open.discard(path)

    def remove_all(self) -> None:
        for path in list(self.open):
            _remove(path)
            self.open.discard(path)

    def close(self) -> None:
        """Remove what is left, then the lock file (last: until then a cleaner sees the owner)."""
        self.remove_all()
        if self.lock_fd is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.stem + ".lock")
            os.close(self.lock_fd)
            self.lock_fd = None


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


class Busy(Refused):
    """The cache's lock was not had in time (a start filling it, or a cleaner)."""


@contextlib.contextmanager
def cache_lock(cache: str, exclusive: bool, wait: float) -> Iterator[bool]:
    """Hold the cache's lock, shared (a start) or exclusive (the cleaner), waiting up to `wait` seconds
    (then Busy). Yields False on a filesystem without locks: a start goes on unprotected, as before."""
    import time

    fd = os.open(os.path.join(cache, LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait
        while True:
            got = _lock(fd, exclusive)
            if got is not False:
                break
            if time.monotonic() > deadline:
                raise Busy("the cache is in use by a start")
            time.sleep(0.05)
        yield bool(got)
    finally:
        os.close(fd)  # the lock goes with the descriptor


def publish(tmp: str, final: str, scratch: Scratch) -> None:
    """Put a finished file or tree in place; another host may have published the same meanwhile: keep theirs.
    A file is hard-linked, never renamed: a rename replaces a name silently, and the trees the other host
    built link the file it replaced, which the cleaner would then count unused (a tree's rename fails on
    theirs, which is not empty)."""
    try:
        if os.path.isdir(tmp):
            os.rename(tmp, final)
        else:
            try:
                os.link(tmp, final)
            except FileExistsError:
                pass
            except OSError:
                os.rename(tmp, final)  # no hard links on this filesystem (the same bytes replace the same bytes)
    except OSError:
        if not os.path.exists(final):
            raise
    _remove(tmp)
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


def hard_link(source: str, dest: str) -> None:
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)  # where links are impossible (keeps the fixed mtime)


def link_tree(src: str, dst: str, put: Callable[[str, str], object] = hard_link) -> bool:
    """`cp -al src/. dst/` (`put`: each file's hard link, or file_clone.clone_file for a private copy);
    False, with dst removed, when src is missing or a file of it is not intact (changed in place through
    a hard link since it was cached), or src went away meanwhile (another host set it aside: damaged)."""
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
                put(source, dest)
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
        hard_link(os.path.join(cache, sha), path)
    if compile_it:
        import compileall

        compileall.compile_dir(building, quiet=1)  # best effort
        for root, _dirs, names in os.walk(building):
            for name in names:
                if name.endswith(".pyc"):
                    os.utime(os.path.join(root, name), (CACHED_MTIME, CACHED_MTIME))
    os.makedirs(os.path.dirname(final), exist_ok=True)
    publish(building, final, scratch)


def place(cache: str, final: str, dest: str, files: list[list[Any]], scratch: Scratch, compile_it: bool,
          put: Callable[[str, str], object] = hard_link) -> None:
    """Link (`put`, as link_tree) `final` into `dest`, building it first when it is not there (another host
    sharing this cache may have built it meanwhile: then theirs is used) or setting it aside when damaged."""
    for _attempt in range(3):
        if link_tree(final, dest, put):
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
