"""What `start` ships, by content hash: only files whose bytes a host has never seen are sent.

Remote side (training/launcher.py, which builds it): `<workdir>/cache/<sha256>` holds every file ever
shipped; `cache/trees/<tree id>` is a complete code tree for one exact file set, hard links into the
cache, and a run's `code/` is hard links to that tree. A warm start sends no file at all; the first
start on a host sends every file once, as one tar (`bundle`) on the start command's own stdin.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import ConfigError

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


def package_id(files: list[ShipFile]) -> str | None:
    """Names one version of tfcluster's own `training/` package (None when it is not among the files)."""
    package = [f for f in files if f.rel.startswith("training/")]
    return tree_id(package) if package else None


def manifest(files: list[ShipFile]) -> bytes:
    """What the host needs to build a code tree from its cache: every file's path, hash and mode."""
    return json.dumps({"files": [[f.rel, f.sha256, f.mode] for f in files]}, separators=(",", ":")).encode()


def bundle(files: list[ShipFile]) -> bytes:
    """One tar of the files, each named by its hash (the cache's layout), modes kept; b"" for none."""
    if not files:
        return b""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for f in files:
            info = tar.gettarinfo(f.local, arcname=f.sha256)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(f.local, "rb") as data:
                tar.addfile(info, data)
    return out.getvalue()


def missing(files: list[ShipFile], have: set[str]) -> list[ShipFile]:
    """The files whose bytes the host has never seen, one per content hash."""
    out: dict[str, ShipFile] = {}
    for f in files:
        if f.sha256 not in have:
            out.setdefault(f.sha256, f)
    return list(out.values())
