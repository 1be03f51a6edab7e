"""The per-host start program. `start` sends this file as the source of `python -S -c` (nothing of
tfcluster needs to be on the host yet) and talks to it over that one command's stdin and stdout, so a
host's whole start is one SSH command, one login shell and one interpreter start up to the launch:

1. prepare: create `<run dir>/{code,events,logs,state}`. When the host already holds this exact code
   tree (`cache/trees/<tree id>`), hard-link it into `code/`. Otherwise report the content hashes the
   cache holds (`@have h1 h2 ...`), receive the missing files as one tar whose members are named by
   their hashes, build the tree from hard links into the cache (tfcluster's own `training/` in a tree
   of its own, `cache/packages/<id>`, byte-compiled once by this interpreter) and link that. Write
   `run.json`, then say `@prepared <run dir>`.
   When the head lists ports (`ports`: [[label, address or "", port], ...]), each is tried with a bind
   (training/probes/port_probe.py, inlined in this source when sent) and the answer is one line before
   `@prepared`: `@ports {"taken": [[label, port, why], ...], "free": [...]}`, where `free` (asked for with
   `free_from`/`free_count`, for `start --auto-ports`) are free ports from `free_from` up.
2. the barrier: wait for `go <seconds>`; anything else, or the end of stdin (the orchestrator stopped
   or died), exits with nothing started (`abort purge`: and the run dir removed, if this command made it). Before `go` the orchestrator may send frames: `run` (run.json
   again: the ports were re-planned) and `env` (JSON {name: value}: `[training] forward_env`, set in this
   process's environment only, never written to a file; the supervisor and so every task, restarts
   included, inherit it).
3. launch: exec `python -S -m training.supervisor --detach` in `code/` (the run marker is already in
   this process's environment, set by the shell that started it). It forks the supervisor and relays
   the task states the supervisor pushes until every task runs (training/supervisor/detach.py).

Frames on stdin are a line `<name> <length>` then that many bytes: `head` (JSON: host, tree, package,
python, and optionally ports), `run` (run.json's bytes), and after `@have`: `manifest` (JSON {"files":
[[path, sha256, mode], ...]}) and `bundle` (the tar). Errors are one line `@error <what>` and exit code 1.
Stdlib only, Python 3.7+: whatever interpreter runs the tasks runs this.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from typing import TYPE_CHECKING

from .probes.port_probe import free_ports, taken_ports  # inlined when sent

if TYPE_CHECKING:
    from typing import Any, BinaryIO

RUN_DIR_ENV = "TFCLUSTER_RUN_DIR"  # training/run/layout.py's (this file cannot import it: it runs alone)
CACHE_DIR = "cache"
HASH = re.compile(r"^[0-9a-f]{64}$")
ABORTED = 3


class Refused(Exception):
    """Something the host cannot do; reported as `@error` (exit 1)."""


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def read_frame(stdin: BinaryIO, name: str) -> bytes:
    header = stdin.readline()
    if not header:
        raise SystemExit(ABORTED)  # the orchestrator went away: nothing was started
    got, _, size = header.decode("ascii", "replace").strip().partition(" ")
    if got != name or not size.isdigit():
        raise Refused(f"expected a {name!r} frame, got {header[:40]!r}")
    data = stdin.read(int(size))
    if len(data) != int(size):
        raise SystemExit(ABORTED)
    return data


def write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def link_file(src: str, dst: str) -> None:
    """A hard link sharing the cached inode (a copy where links are impossible); replaces dst."""
    if os.path.lexists(dst):
        os.unlink(dst)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def link_tree(src: str, dst: str) -> None:
    """`cp -al src/. dst/`: every file of src hard-linked at the same place under dst."""
    for root, _dirs, files in os.walk(src):
        target = os.path.join(dst, os.path.relpath(root, src))
        os.makedirs(target, exist_ok=True)
        for name in files:
            link_file(os.path.join(root, name), os.path.join(target, name))


def publish(building: str, final: str) -> None:
    """Rename a finished tree into place; another start may have built the same one meanwhile: keep theirs."""
    try:
        os.rename(building, final)
    except OSError:
        if not os.path.isdir(final):
            raise
        shutil.rmtree(building, ignore_errors=True)


def build_tree(cache: str, final: str, files: list[list[Any]], package: str | None) -> None:
    """cache/trees/<id> (or cache/packages/<id>) from hard links into the cache, unless it exists."""
    if os.path.isdir(final):
        return
    building = f"{final}.tmp{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    for rel, sha, _mode in files:
        path = os.path.join(building, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        link_file(os.path.join(cache, sha), path)
    if package is not None:
        link_tree(os.path.join(package, "training"), os.path.join(building, "training"))
    os.makedirs(os.path.dirname(final), exist_ok=True)
    publish(building, final)


def build_package(cache: str, package_id: str, files: list[list[Any]]) -> str:
    """tfcluster's own package, byte-compiled once per host and version: every code tree links it whole,
    and the hard-linked sources keep their mtime, so the .pyc files stay valid in every run."""
    final = os.path.join(cache, "packages", package_id)
    if not os.path.isdir(final):
        building = f"{final}.tmp{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        for rel, sha, _mode in files:
            path = os.path.join(building, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            link_file(os.path.join(cache, sha), path)
        import compileall

        compileall.compile_dir(os.path.join(building, "training"), quiet=1)  # best effort
        os.makedirs(os.path.dirname(final), exist_ok=True)
        publish(building, final)
    return final


def receive(stdin: BinaryIO, cache: str, tree: str, package_id: str | None) -> None:
    """The cold path: say what the cache holds, take the missing files, build the code tree."""
    have = sorted(name for name in os.listdir(cache) if HASH.match(name))
    say("@have " + " ".join(have))
    manifest = json.loads(read_frame(stdin, "manifest"))
    bundle = read_frame(stdin, "bundle")
    if bundle:
        import io
        import tarfile

        with tarfile.open(fileobj=io.BytesIO(bundle)) as tar:
            for member in tar.getmembers():
                if not (member.isfile() and HASH.match(member.name)):
                    raise Refused(f"unexpected member in the code bundle: {member.name!r}")
                source = tar.extractfile(member)
                assert source is not None
                path = os.path.join(cache, member.name)
                write_atomic(path, source.read())
                os.chmod(path, member.mode & 0o777)
    files = manifest["files"]
    package = None
    if package_id is not None:
        own = [f for f in files if f[0].startswith("training/")]
        package = build_package(cache, package_id, own)
        files = [f for f in files if not f[0].startswith("training/")]
    build_tree(cache, os.path.join(cache, "trees", tree), files, package)


def prepare(stdin: BinaryIO, run_dir: str) -> dict[str, Any]:
    head = json.loads(read_frame(stdin, "head"))
    run_json = read_frame(stdin, "run")
    for sub in ("code", "events", "logs", "state"):
        os.makedirs(os.path.join(run_dir, sub), exist_ok=True)
    cache = os.path.abspath(CACHE_DIR)
    tree = os.path.join(cache, "trees", head["tree"])
    if not os.path.isdir(tree):
        os.makedirs(cache, exist_ok=True)
        receive(stdin, cache, head["tree"], head.get("package"))
    link_tree(tree, os.path.join(run_dir, "code"))
    write_atomic(os.path.join(run_dir, "run.json"), run_json)
    if "ports" in head:
        report = {"taken": taken_ports(head["ports"]),
                  "free": free_ports(int(head.get("free_from", 0)), int(head.get("free_count", 0)))}
        say("@ports " + json.dumps(report, separators=(",", ":")))
    return head  # type: ignore[no-any-return]


def barrier(stdin: BinaryIO, run_dir: str) -> str:
    """Wait for the word that ends the barrier (`go <seconds>`, or anything else: abort), taking the
    frames that may come first: `run` (re-planned run.json) and `env` (forwarded variables, into this
    process's environment only). Returns the line."""
    while True:
        line = stdin.readline().decode("ascii", "replace").strip()
        name, _, size = line.partition(" ")
        if name not in ("run", "env") or not size.isdigit():
            return line
        data = stdin.read(int(size))
        if len(data) != int(size):
            return ""
        if name == "run":
            write_atomic(os.path.join(run_dir, "run.json"), data)
        else:
            os.environ.update({str(k): str(v) for k, v in json.loads(data).items()})


def launch(head: dict[str, Any], run_dir: str, ready_timeout: str) -> None:
    """Become the supervisor's launcher (exec: this process, its pid and the run marker it carries)."""
    python = head["python"]
    if python.startswith("~/"):
        python = os.path.expanduser(python)
    os.chdir(os.path.join(run_dir, "code"))
    argv = [python, "-S", "-m", "training.supervisor", "--detach", "--run-dir", run_dir,
            "--host", head["host"], "--ready-timeout", ready_timeout]
    try:
        os.execvp(python, argv)
    except OSError as exc:
        raise Refused(f"cannot start {python}: {exc}") from exc


def main() -> int:
    stdin = sys.stdin.buffer
    run_dir = os.environ.get(RUN_DIR_ENV, "")
    try:
        if not os.path.isabs(run_dir):
            raise Refused(f"{RUN_DIR_ENV} is not an absolute path: {run_dir!r}")
        made = not os.path.isdir(run_dir)
        head = prepare(stdin, run_dir)
        say(f"@prepared {run_dir}")
        word, _, seconds = barrier(stdin, run_dir).partition(" ")
        if word != "go":
            if word == "abort" and seconds == "purge" and made:  # a refused start leaves nothing here
                shutil.rmtree(run_dir, ignore_errors=True)
            return ABORTED  # another host failed, or the user pressed Ctrl-C: nothing starts here
        launch(head, run_dir, seconds or "20")
    except Refused as exc:
        say(f"@error {exc}")
        return 1
    except (OSError, ValueError, KeyError) as exc:
        say(f"@error {type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
