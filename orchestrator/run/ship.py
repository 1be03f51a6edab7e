"""What `start` ships, by content hash: only files whose bytes a host has never seen are sent, streamed.

Two file sets travel: the user's `[training] sync` files (the code tree, linked into the host's run dir
as `code/`, the tasks' cwd) and tfcluster's own `training` package, shipped under HOST_PACKAGE with
`tfcluster_report.py` beside it (linked as `lib/`): a user's own `training/`, `tfcluster_report.py` or
any other name ships and imports as theirs.

Remote side (training/launcher.py, which builds it): `<workdir>/cache/<sha256>` holds every file ever
shipped; `cache/trees/<id>` and `cache/packages/<id>` are the sets, hard links into the cache. A warm
start sends no file and no manifest; otherwise the host asks for the manifest and names the hashes it
lacks, and each of those goes as one `blob` frame, read from disk and sent a chunk at a time: memory
stays bounded whatever the size of `sync`, and a cancelled start stops between two chunks.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from orchestrator.config.validate import sync_sources
from orchestrator.errors import TfclusterError
from orchestrator.run.file_hashes import FileHashes
from training.run.layout import HOST_PACKAGE

SKIP_DIRS = {"__pycache__", ".git", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
CHUNK = 1 << 20  # read and sent at a time: the memory a host's stream holds


@dataclass(frozen=True)
class ShipFile:
    local: str
    rel: str  # path under the host's code/ (or lib/) dir, with '/' separators
    sha256: str
    size: int
    mode: int
    mtime_ns: int = 0  # as hashed: a file that changes while it is shipped is caught by it


class ShippedFileChanged(TfclusterError):
    """A synced file changed between its hashing and its sending: the host discards it, the start fails."""


@dataclass(frozen=True)
class FileSets:
    """What one start ships: the user's code tree and tfcluster's package, each named by its content."""

    tree: list[ShipFile]
    package: list[ShipFile]

    @cached_property
    def tree_id(self) -> str:
        return set_id(self.tree)

    @cached_property
    def package_id(self) -> str:
        return set_id(self.package)

    @cached_property
    def manifest(self) -> bytes:
        """What a host needs to build the sets from its cache: every file's path, hash and mode."""
        return json.dumps({kind: [[f.rel, f.sha256, f.mode] for f in files]
                           for kind, files in (("tree", self.tree), ("package", self.package))},
                          separators=(",", ":")).encode()

    @cached_property
    def by_hash(self) -> dict[str, ShipFile]:
        return {f.sha256: f for f in (*self.package, *self.tree)}


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


def _entry(local: str, rel: str, hashes: FileHashes) -> ShipFile:
    st = os.stat(local)
    return ShipFile(local=local, rel=rel, sha256=hashes.sha256(local, st), size=st.st_size, mode=st.st_mode & 0o777,
                    mtime_ns=st.st_mtime_ns)


def _package_sources() -> list[tuple[str, str]]:
    """tfcluster's `training/` package as installed next to this orchestrator, named HOST_PACKAGE on the
    hosts, and `tfcluster_report.py` beside it (on every task's PYTHONPATH): (local path, shipped name)."""
    import training

    root = Path(training.__file__).resolve().parent
    report = root / "public" / "tfcluster_report.py"
    return [*_walk(root, HOST_PACKAGE), (str(report), report.name)]


def _sync_sources(sync: Iterable[str], base_dir: str, source: str) -> list[tuple[str, str]]:
    """The user's `[training] sync` entries, relative to hosts.toml's directory, dirs walked: (local path,
    shipped name)."""
    return [(local, r.removeprefix("./")) for full, rel in sync_sources(sync, base_dir, source)
            for local, r in _walk(full, rel)]


def training_package_files(hashes: FileHashes) -> list[ShipFile]:
    """tfcluster's package as it ships (_package_sources), hashed."""
    return [_entry(local, rel, hashes) for local, rel in _package_sources()]


def sync_files(sync: Iterable[str], base_dir: str, hashes: FileHashes, source: str = "hosts.toml") -> list[ShipFile]:
    """The user's `[training] sync` files as they ship (_sync_sources), hashed."""
    return [_entry(local, rel, hashes) for local, rel in _sync_sources(sync, base_dir, source)]


def shipped_bytes(sync: Iterable[str], base_dir: str, source: str) -> int:
    """What a start writes into the workdir of a host that has none of it cached yet: the bytes of the sync
    and of tfcluster's package (sizes only, nothing hashed: `check` compares it with the free space)."""
    files = {local for local, _ in (*_sync_sources(sync, base_dir, source), *_package_sources())}
    return sum(os.stat(local).st_size for local in files)


def file_sets(sync: Iterable[str], base_dir: str, source: str) -> FileSets:
    hashes = FileHashes()
    sets = FileSets(tree=sync_files(sync, base_dir, hashes, source), package=training_package_files(hashes))
    hashes.save()
    return sets


def set_id(files: list[ShipFile]) -> str:
    """Names one exact set of (path, content): equal ids mean an identical tree."""
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.rel):
        h.update(f"{f.rel}\0{f.sha256}\n".encode())
    return h.hexdigest()[:32]


def send_blob(f: ShipFile, send: Callable[[bytes], None], check: Callable[[], None]) -> None:
    """One `blob <sha> <mode> <size>` frame: the file read and sent CHUNK bytes at a time (`check` runs
    between chunks and raises to stop: a cancelled start), then `ok`, or `changed` when the file is not
    the one hashed any more (the host then keeps nothing of it)."""
    with open(f.local, "rb") as data:
        send(f"blob {f.sha256} {f.mode:o} {f.size}\n".encode())
        left, shrank = f.size, False
        while left > 0:
            check()
            chunk = data.read(min(CHUNK, left))
            if not chunk:  # the file shrank: the host still reads `size` bytes, then hears `changed`
                chunk, shrank = bytes(min(CHUNK, left)), True
            send(chunk)
            left -= len(chunk)
        st = os.fstat(data.fileno())
        changed = shrank or (st.st_size, st.st_mtime_ns) != (f.size, f.mtime_ns)
        send(b"changed\n" if changed else b"ok\n")
    if changed:
        raise ShippedFileChanged(f"{f.local} changed while it was shipped: start again")
