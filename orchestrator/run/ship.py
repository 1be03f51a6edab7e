"""Ship code to a host by content hash: only files whose bytes the host has never seen are uploaded.

Remote side: `<workdir>/cache/<sha256>` holds every file ever shipped; a run's `code/` is made of
hard links into it (a copy where links are impossible). Unchanged files cost nothing but one line of
a shell script; the first run on a host pays for every file once.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import ConfigError, HostError
from orchestrator.transport.base import Transport, remote_path

CACHE_DIR = "cache"
TREES_DIR = "trees"  # cache/trees/<tree id>/: a complete code tree, hard links into the cache
PACKAGES_DIR = "packages"  # cache/packages/<id>/training: tfcluster's own package, byte-compiled
SCRIPT_CHUNK = 64 * 1024  # keep every `sh -c` argument far below Linux's 128 KiB per-argument limit
SKIP_DIRS = {"__pycache__", ".git", ".mypy_cache", ".pytest_cache", ".ruff_cache"}


@dataclass(frozen=True)
class ShipFile:
    local: str
    rel: str  # path under the run's code/ dir, with '/' separators
    sha256: str
    size: int
    mode: int


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _walk(root: Path, rel_root: str) -> Iterable[tuple[str, str]]:
    if root.is_file():
        yield str(root), rel_root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            full = Path(dirpath) / name
            yield str(full), f"{rel_root}/{full.relative_to(root).as_posix()}"


def _entry(local: str, rel: str) -> ShipFile:
    st = os.stat(local)
    return ShipFile(local=local, rel=rel, sha256=_sha256(local), size=st.st_size, mode=st.st_mode & 0o777)


def training_package_files() -> list[ShipFile]:
    """The `training/` package as installed next to this orchestrator (what every host runs)."""
    import training

    root = Path(training.__file__).resolve().parent
    return [_entry(local, rel) for local, rel in _walk(root, "training")]


def sync_files(sync: Iterable[str], base_dir: str, source: str = "hosts.toml") -> list[ShipFile]:
    """The user's `[training] sync` entries, relative to hosts.toml's directory; dirs are walked."""
    out: list[ShipFile] = []
    for entry in sync:
        try:
            path = Path(entry).expanduser()
        except RuntimeError:  # `~name` of a user this machine does not know
            raise ConfigError(source, "training.sync", f"{entry!r}: no such user's home directory") from None
        full = path if path.is_absolute() else Path(base_dir) / path
        if not full.exists():
            raise ConfigError(source, "training.sync", f"{entry!r} does not exist (looked for {full})")
        # Outside the project dir: shipped under its own name into code/.
        outside = path.is_absolute() or ".." in path.parts
        rel = full.resolve().name if outside else path.as_posix().rstrip("/")
        if rel.split("/")[0] == "training":
            raise ConfigError(source, "training.sync", f"{entry!r} would overwrite tfcluster's own `training/` package")
        out.extend(_entry(local, r) for local, r in _walk(full, rel))
    return out


def tree_id(files: list[ShipFile]) -> str:
    """Names one exact set of (path, content): equal ids mean an identical code tree."""
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.rel):
        h.update(f"{f.rel}\0{f.sha256}\n".encode())
    return h.hexdigest()[:32]


def _bundle(files: list[ShipFile]) -> str:
    """A temporary tar of the files, each named by its hash (the cache's layout), modes kept."""
    fd, path = tempfile.mkstemp(prefix="tfcluster-ship-", suffix=".tar")
    with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w") as tar:
        for f in files:
            info = tar.gettarinfo(f.local, arcname=f.sha256)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(f.local, "rb") as data:
                tar.addfile(info, data)
    return path


def _chunks(commands: list[str], prefix: str) -> list[str]:
    scripts, current = [], [prefix]
    size = len(prefix)
    for cmd in commands:
        if size + len(cmd) > SCRIPT_CHUNK and len(current) > 1:
            scripts.append("\n".join(current))
            current, size = [prefix], len(prefix)
        current.append(cmd)
        size += len(cmd) + 1
    if len(current) > 1:
        scripts.append("\n".join(current))
    return scripts


def _link_tree(files: list[ShipFile], cache: str, tree: str) -> list[str]:
    """Shell lines that build `<tree>.tmp$$` from hard links into the cache (a copy where links fail)."""
    building = f"{tree}.tmp$$"
    q_building = f"{shlex.quote(tree)}.tmp$$"
    lines = [f"mkdir -p {q_building}"]
    for d in sorted({os.path.dirname(f"{building}/{f.rel}") for f in files}):
        if d != building:
            lines.append(f"mkdir -p {q_building}/{shlex.quote(d[len(building) + 1:])}")
    for f in files:
        src, dst = shlex.quote(f"{cache}/{f.sha256}"), f"{q_building}/{shlex.quote(f.rel)}"
        # A hard link shares the cached inode (the mode of its first upload).
        lines.append(f"ln -f {src} {dst} 2>/dev/null || cp -f {src} {dst}")
    return lines


def _publish(tree: str) -> list[str]:
    """Rename `<tree>.tmp$$` into place; another start may have built the same tree meanwhile: keep theirs."""
    q = shlex.quote(tree)
    return [f"mv -T {q}.tmp$$ {q} 2>/dev/null || rm -rf {q}.tmp$$"]


def list_cache_command(workdir: str) -> str:
    """Shell that creates the cache and lists what it holds (callers fold it into a bigger command)."""
    cache = shlex.quote(f"{workdir}/{CACHE_DIR}")
    return f"mkdir -p {cache} && ls -1 {cache}"


def ship(
    transport: Transport,
    files: list[ShipFile],
    workdir: str,
    code_dir: str,
    *,
    timeout: float,
    have: set[str] | None = None,
    write_file: tuple[str, bytes] | None = None,
    python: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> int:
    """Put `files` under `code_dir` on the host (both absolute). Returns how many were uploaded.

    `have`: the cache listing when the caller already has it (saves a round trip); `write_file`:
    (path, bytes) also written, atomically, by the last command (saves an SFTP session); `python`:
    the host's interpreter, which byte-compiles the shipped `training/` package once per version of
    it (see below). Safe to call again after a lost connection: every step is idempotent."""
    cache = f"{workdir}/{CACHE_DIR}"
    if have is None:
        listing = transport.run_shell(list_cache_command(workdir), timeout=timeout)
        if not listing.ok:
            raise HostError(transport.host, "ship", f"cannot list {cache}: {listing.stderr.strip()[:200]}")
        have = set(listing.stdout.split())
    missing: dict[str, ShipFile] = {}
    for f in files:
        if f.sha256 not in have:
            missing.setdefault(f.sha256, f)
    total = len(missing)
    if progress:
        progress(0, total)
    moves: list[str] = []
    if missing:
        if cancelled():
            raise HostError(transport.host, "cancelled", "start was interrupted")
        # One archive, one SFTP transfer: a first run ships dozens of small files at once.
        bundle = _bundle(list(missing.values()))
        try:
            remote_tar = f"{cache}/.upload-{os.getpid()}-{threading.get_ident()}.tar"
            transport.put_file(bundle, remote_tar, 0o600)
        finally:
            os.unlink(bundle)
        moves.append(f"tar -xf {shlex.quote(remote_tar)} -C {shlex.quote(cache)} && rm -f {shlex.quote(remote_tar)}")
    if progress:
        progress(total, total)
    # The whole code tree for this exact file set is built once per host (hard links into the cache)
    # and every run copies it as links with one `cp -al`: a warm start costs one process, not one per file.
    package = [f for f in files if f.rel.startswith("training/")]
    links: list[str] = []
    tree_files = files
    pkg: str | None = None
    if python is not None and package:
        # tfcluster's own package gets a tree of its own, byte-compiled once by the host's python, and
        # every code tree links it whole: a user who edits train.py between runs (a new code tree each
        # time) never pays for compiling it again, and no run's supervisor or tasks compile it at import
        # (the hard-linked sources keep their mtime, so the .pyc files stay valid). Best effort: a host
        # whose python cannot compile (`check` says why) compiles at import as before.
        pkg = f"{cache}/{PACKAGES_DIR}/{tree_id(package)}"
        links += [f"if [ ! -d {shlex.quote(pkg)} ]; then", *_link_tree(package, cache, pkg),
                  f"{remote_path(python)} -S -m compileall -q {shlex.quote(pkg)}.tmp$$/training >/dev/null 2>&1 || true",
                  *_publish(pkg), "fi"]
        tree_files = [f for f in files if not f.rel.startswith("training/")]
    tree = f"{cache}/{TREES_DIR}/{tree_id(files)}"
    links += [f"if [ ! -d {shlex.quote(tree)} ]; then", *_link_tree(tree_files, cache, tree)]
    if pkg is not None:
        links.append(f"cp -al {shlex.quote(pkg)}/training {shlex.quote(tree)}.tmp$$/training")
    links += [*_publish(tree), "fi",
              f"mkdir -p {shlex.quote(code_dir)}",
              f"cp -alf {shlex.quote(tree)}/. {shlex.quote(code_dir)}/ 2>/dev/null || "
              f"cp -af {shlex.quote(tree)}/. {shlex.quote(code_dir)}/"]
    # The tree script must stay in one piece (its if/fi and $$): only the moves are chunked apart.
    scripts = [*_chunks(moves, "set -e"), "set -e\n" + "\n".join(links)]
    stdin = None
    if write_file is not None:
        path, stdin = write_file
        tmp = shlex.quote(f"{path}.tmp")
        scripts[-1] += f"\ncat > {tmp}\nmv -f {tmp} {shlex.quote(path)}"
    for i, script in enumerate(scripts):
        last = i == len(scripts) - 1
        result = transport.run_shell(script, timeout=timeout, stdin=stdin if last else None)
        if not result.ok:
            raise HostError(transport.host, "ship", f"cannot place files: {result.stderr.strip()[:200]}")
    return total
