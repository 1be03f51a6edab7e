"""The per-host start program. `start` sends this file as the source of `python -S -c` (nothing of
tfcluster needs to be on the host yet) and talks to it over that one command's stdin and stdout, so a
host's whole start is one SSH command, one login shell and one interpreter start up to the launch.

The host's run dir is `$TFCLUSTER_RUN_DIR` = `<workdir>/runs/<run-id>/<host>` (training/run/layout.py),
set by the shell that started this program (with `umask 077` before anything is written: every file of a
run is private from its first byte). Its parts:

1. prepare: create the run dir, write `run.json`. The host keeps a content cache in `<workdir>/cache/`:
   `<sha256>` per file ever shipped, `trees/<id>/` (the user's code trees) and `packages/<id>/`
   (tfcluster's own package, byte-compiled once), all hard links into the cache. When both the head's
   tree and package are there and intact, they are linked into `code/` and `lib/`. Otherwise the host
   says `@send`, takes the `manifest` frame ({"tree": [[path, sha256, mode], ...], "package": [...]}),
   says `@need <hashes>` (the files it lacks), receives exactly those as `blob` frames, streamed to disk
   (bounded memory whatever their size), and builds what was missing. Then `@prepared <run dir>`.
   When the head lists ports (`ports`: [[label, address or "", port], ...]) each is tried with a bind
   (training/probes/port_probe.py, inlined when sent) and the answer is one line before `@prepared`:
   `@ports {"taken": [[label, port, why], ...], "free": [...]}` (`free` asked for with
   `free_from`/`free_count`, for `start --auto-ports`).
2. the barrier: wait for `go <seconds>`, taking the frames that may come first: `run` (run.json again:
   the ports were re-planned) and `env` (JSON {name: value}: `[training] forward_env`, in this process's
   environment only, never in a file). Anything else (`abort`), the end of stdin or SIGTERM/SIGHUP (the
   orchestrator stopped, died or was interrupted, at any moment, also in the middle of a file) ends this
   program with nothing started: it removes its half-written cache files and the run dir it made, and
   the run's directory too when no other host has one there.
3. launch: exec `python -S -m <head's supervisor module> --detach` (or the head's `launch`: a Slurm run's
   `--hand-over`) in `lib/` (the run marker is already in this process's environment). It forks the
   supervisor and relays the task states it pushes until every task runs (training/supervisor/detach.py).

Every cached file has the same fixed mtime (CACHED_MTIME): a program that rewrites one of its synced
files in place (they are hard links into the cache) changes that mtime, so the next start finds the tree
damaged, drops the changed cache files and receives them again: a new run always gets exactly the bytes
the user sent. Everything written in the shared cache goes to a unique temporary name first, then is
renamed into place: hosts sharing one workdir (NFS) never see each other's partial files.

Frames on stdin are a line `<name> <length>` then that many bytes: `head` (JSON: host, tree, package,
supervisor, python, and optionally ports), `run`, `manifest`; a `blob` frame is `blob <sha256> <mode>
<length>`, the bytes, then `ok` (or `changed`: the file changed while it was sent; nothing is kept). Errors are one line `@error <what>` and exit code 1. Stdlib only, Python 3.7+.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import sys
from typing import TYPE_CHECKING

from .probes.port_probe import free_ports, taken_ports  # inlined when sent

if TYPE_CHECKING:
    from typing import Any, BinaryIO

RUN_DIR_ENV = "TFCLUSTER_RUN_DIR"  # training/run/layout.py's (this file cannot import it: it runs alone)
CACHE_DIR = "cache"
START_LOCK = ".start-lock"  # in the host's run dir: one start command at a time (a retry waits for the first)
LOCK_WAIT_S = 30.0
HASH = re.compile(r"^[0-9a-f]{64}$")
CACHED_MTIME = 1_000_000_000  # every cached file's mtime (2001-09-09): any write to one changes it
CHUNK = 1 << 20
ABORTED = 3


class Refused(Exception):
    """Something the host cannot do; reported as `@error` (exit 1)."""


class Aborted(Exception):
    """The orchestrator went away or said abort, or a signal came: nothing starts here."""


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def read_exactly(stdin: BinaryIO, size: int) -> bytes:
    data = stdin.read(size)
    if len(data) != size:
        raise Aborted()
    return data


def read_frame(stdin: BinaryIO, name: str) -> bytes:
    header = stdin.readline()
    if not header:
        raise Aborted()
    got, _, size = header.decode("ascii", "replace").strip().partition(" ")
    if got != name or not size.isdigit():
        raise Refused(f"expected a {name!r} frame, got {header[:40]!r}")
    return read_exactly(stdin, int(size))


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
    """`cp -al src/. dst/` (copies where links are impossible); False, with dst removed, when a file of src
    is not intact (changed in place by a run since it was cached)."""
    for root, _dirs, files in os.walk(src):
        target = os.path.join(dst, os.path.relpath(root, src))
        os.makedirs(target, exist_ok=True)
        for name in files:
            source, dest = os.path.join(root, name), os.path.join(target, name)
            if not intact(source):
                shutil.rmtree(dst, ignore_errors=True)
                return False
            if os.path.lexists(dest):
                os.unlink(dest)
            try:
                os.link(source, dest)
            except OSError:
                shutil.copy2(source, dest)
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


def lock_run_dir(run_dir: str) -> None:
    """Create the host's run dir and hold its start lock until this process ends or execs (the fd is not
    inherited): a start retried after a lost connection waits here until the command it replaces has
    removed what it made. The lock file goes with the dir it is in, so after the wait the path is checked
    to still be the locked file."""
    import fcntl
    import time

    deadline = time.monotonic() + LOCK_WAIT_S
    path = os.path.join(run_dir, START_LOCK)
    while True:
        os.makedirs(run_dir, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise Refused("another start of this run is still preparing on this host") from None
                    time.sleep(0.05)
        except OSError as exc:
            if not isinstance(exc, BlockingIOError) and exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP):
                return  # a filesystem without locks: no retry protection, nothing else changes
            raise
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return  # held for the rest of this process (the fd stays open)
        except FileNotFoundError:
            pass
        os.close(fd)  # it was removed while we waited: lock the new one


def prepare(stdin: BinaryIO, run_dir: str, scratch_for: list[Scratch]) -> dict[str, Any]:
    head = json.loads(read_frame(stdin, "head"))
    run_json = read_frame(stdin, "run")
    lock_run_dir(run_dir)
    cache = os.path.abspath(CACHE_DIR)
    scratch = Scratch(cache, str(head["host"]))
    scratch_for.append(scratch)  # from here on, an abort removes the run dir
    for sub in ("events", "logs", "state"):
        os.makedirs(os.path.join(run_dir, sub), exist_ok=True)
    os.makedirs(cache, exist_ok=True)
    Scratch.remove_stale(cache, str(head["host"]))
    write_atomic(os.path.join(run_dir, "run.json"), run_json, scratch)
    parts = {"tree": (os.path.join(cache, "trees", head["tree"]), "code", False),
             "package": (os.path.join(cache, "packages", head["package"]), "lib", True)}
    linked = {kind: os.path.isdir(final) and link_tree(final, os.path.join(run_dir, sub))
              for kind, (final, sub, _c) in parts.items()}
    if not all(linked.values()):
        say("@send")
        manifest = json.loads(read_frame(stdin, "manifest"))
        files = [f for kind in parts if not linked[kind] for f in manifest[kind]]
        need = missing(cache, files)
        say("@need " + " ".join(need))
        for _ in need:
            header = stdin.readline()
            if not header:
                raise Aborted()
            receive_blob(stdin, header, cache, scratch)
        for kind, (final, sub, compile_it) in parts.items():
            if not linked[kind]:
                if os.path.isdir(final):  # changed in place by a run: set aside (removed below), rebuilt
                    os.rename(final, scratch.name())
                build(cache, final, manifest[kind], scratch, compile_it)
                if not link_tree(final, os.path.join(run_dir, sub)):
                    raise Refused(f"the {kind} just built in {final} was changed while it was linked")
        scratch.remove_all()  # the damaged trees set aside
    if "ports" in head:
        report = {"taken": taken_ports(head["ports"]),
                  "free": free_ports(int(head.get("free_from", 0)), int(head.get("free_count", 0)))}
        say("@ports " + json.dumps(report, separators=(",", ":")))
    return head  # type: ignore[no-any-return]


def barrier(stdin: BinaryIO, run_dir: str, scratch: Scratch) -> str:
    """Wait for the word that ends the barrier (`go <seconds>`, or anything else: abort), taking the
    frames that may come first: `run` (re-planned run.json) and `env` (forwarded variables, into this
    process's environment only). Returns the line."""
    while True:
        line = stdin.readline().decode("ascii", "replace").strip()
        name, _, size = line.partition(" ")
        if name not in ("run", "env") or not size.isdigit():
            return line
        data = read_exactly(stdin, int(size))
        if name == "run":
            write_atomic(os.path.join(run_dir, "run.json"), data, scratch)
        else:
            os.environ.update({str(k): str(v) for k, v in json.loads(data).items()})


def launch(head: dict[str, Any], run_dir: str, ready_timeout: str) -> None:
    """Become the supervisor's launcher (exec: this process, its pid and the run marker it carries)."""
    python = head["python"]
    if python.startswith("~/"):
        python = os.path.expanduser(python)
    os.chdir(os.path.join(run_dir, "lib"))
    argv = [python, "-S", "-m", str(head["supervisor"]), *head.get("launch", ["--detach"]), "--run-dir", run_dir,
            "--host", head["host"], "--ready-timeout", ready_timeout]
    try:
        os.execvp(python, argv)
    except OSError as exc:
        raise Refused(f"cannot start {python}: {exc}") from exc


def remove_unlaunched(run_dir: str) -> None:
    """An aborted start leaves nothing: the host's run dir (we hold its start lock, so no other attempt is
    using it; one that launched a supervisor there left it be), then the run's directory if no other
    host has one there."""
    if os.path.exists(os.path.join(run_dir, "state", f"supervisor-{os.path.basename(run_dir)}.lock")):
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    with contextlib.suppress(OSError):  # another host's part of the run is there
        os.rmdir(os.path.dirname(run_dir))


def _on_signal(signum: int, _frame: object) -> None:
    raise Aborted()


def main() -> int:
    os.umask(0o077)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _on_signal)
    stdin = sys.stdin.buffer
    run_dir = os.environ.get(RUN_DIR_ENV, "")
    scratch: list[Scratch] = []
    try:
        if not os.path.isabs(run_dir):
            raise Refused(f"{RUN_DIR_ENV} is not an absolute path: {run_dir!r}")
        try:
            head = prepare(stdin, run_dir, scratch)
            say(f"@prepared {run_dir}")
            word, _, seconds = barrier(stdin, run_dir, scratch[0]).partition(" ")
            if word != "go":
                raise Aborted()
        except (Aborted, Refused, OSError, ValueError, KeyError):
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(sig, signal.SIG_IGN)  # the clean-up itself is not interrupted
            for s in scratch:
                s.remove_all()
            if scratch:  # it got as far as its lock: what is there is its own
                remove_unlaunched(run_dir)
            raise
        launch(head, run_dir, seconds or "20")
    except Aborted:
        return ABORTED  # another host failed, or the user pressed Ctrl-C: nothing starts here
    except Refused as exc:
        say(f"@error {exc}")
        return 1
    except (OSError, ValueError, KeyError) as exc:
        say(f"@error {type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
