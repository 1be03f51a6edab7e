"""The per-host start program. `start` sends this file as the source of `python -S -c` (nothing of
tfcluster needs to be on the host yet) and talks to it over that one command's stdin and stdout, so a
host's whole start is one SSH command, one login shell and one interpreter start up to the launch.

The host's run dir is `$TFCLUSTER_RUN_DIR` = `<workdir>/runs/<run-id>/<host>` (training/run/layout.py),
set by the shell that started this program (with `umask 077` before anything is written: every file of a
run is private from its first byte). Its parts:

1. prepare: create the run dir, write `run.json`. The host keeps a content cache in `<workdir>/cache/`:
   `<sha256>` per file ever shipped, `trees/<id>/` (the user's code trees) and `packages/<id>/`
   (tfcluster's own package, byte-compiled once), all hard links into the cache. When both the head's
   tree and package are there and intact, the package is linked into `lib/` and the tree copied into
   `code/` (a private copy, a reflink where the filesystem can: training/run/file_clone.py), with the
   cache's lock held shared (training/run/cache_gc.py cleans it) and the ids named in the run dir's
   `cache-uses.json` first. Otherwise the host
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

Every cached file has the same fixed mtime (CACHED_MTIME): a program that rewrites a file of `lib/` in
place (hard links into the cache) changes that mtime, so the next start finds the package damaged, drops
the changed cache files and receives them again: a new run always gets exactly the bytes the user sent.
A host's `code/` is its own copy: what its tasks write there, no other host's tasks read. Everything
written in the shared cache goes to a unique temporary name first (owned by a lock this process holds),
then is renamed into place: hosts sharing one workdir (NFS) never see each other's partial files.

Frames on stdin are a line `<name> <length>` then that many bytes: `head` (JSON: host, tree, package,
supervisor, python, and optionally ports), `run`, `manifest`; a `blob` frame is `blob <sha256> <mode>
<length>`, the bytes, then `ok` (or `changed`: the file changed while it was sent; nothing is kept). Errors are one line `@error <what>` and exit code 1. Stdlib only, Python 3.7+.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import sys
from typing import TYPE_CHECKING

from .probes.port_probe import free_ports, taken_ports  # inlined when sent
from .run.content_cache import (  # inlined when sent
    USES_FILE,
    Aborted,
    Refused,
    Scratch,
    cache_lock,
    hard_link,
    link_tree,
    missing,
    place,
    receive_blob,
    write_atomic,
)
from .run.file_clone import clone_file  # inlined when sent

if TYPE_CHECKING:
    from typing import Any, BinaryIO

RUN_DIR_ENV = "TFCLUSTER_RUN_DIR"  # training/run/layout.py's (this file cannot import it: it runs alone)
CACHE_DIR = "cache"
START_LOCK = ".start-lock"  # in the host's run dir: one start command at a time (a retry waits for the first)
LOCK_WAIT_S = 30.0
CACHE_LOCK_WAIT_S = 600.0  # a cleaner holds the cache for seconds at most: waiting is better than failing
ABORTED = 3


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
    os.makedirs(cache, exist_ok=True)
    scratch = Scratch(cache)
    scratch_for.append(scratch)  # from here on, an abort removes the run dir
    for sub in ("events", "logs", "state"):
        os.makedirs(os.path.join(run_dir, sub), exist_ok=True)
    write_atomic(os.path.join(run_dir, "run.json"), run_json, scratch)
    with cache_lock(cache, exclusive=False, wait=CACHE_LOCK_WAIT_S):  # no cleaner meanwhile
        Scratch.remove_stale(cache)
        uses = {"tree": head["tree"], "package": head["package"]}  # named before the cache is read
        write_atomic(os.path.join(run_dir, USES_FILE), json.dumps(uses).encode(), scratch)
        fill_cache(stdin, run_dir, cache, head, scratch)
    if "ports" in head:
        report = {"taken": taken_ports(head["ports"]),
                  "free": free_ports(int(head.get("free_from", 0)), int(head.get("free_count", 0)))}
        say("@ports " + json.dumps(report, separators=(",", ":")))
    return head  # type: ignore[no-any-return]


def fill_cache(stdin: BinaryIO, run_dir: str, cache: str, head: dict[str, Any], scratch: Scratch) -> None:
    """`lib/` hard-linked to the cached package, `code/` a private copy of the cached tree (clone_file:
    what a host's tasks write there is never what another host's read), after receiving what is lacking."""
    parts = {"tree": (os.path.join(cache, "trees", head["tree"]), "code", False, clone_file),
             "package": (os.path.join(cache, "packages", head["package"]), "lib", True, hard_link)}
    linked = {kind: link_tree(final, os.path.join(run_dir, sub), put) for kind, (final, sub, _c, put) in parts.items()}
    if all(linked.values()):
        return
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
    for kind, (final, sub, compile_it, put) in parts.items():
        if not linked[kind]:
            place(cache, final, os.path.join(run_dir, sub), manifest[kind], scratch, compile_it, put)
    scratch.remove_all()  # the damaged trees set aside


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
                s.close()
            if scratch:  # it got as far as its lock: what is there is its own
                remove_unlaunched(run_dir)
            raise
        scratch[0].close()  # nothing of this start is left in the cache's temporary names
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
