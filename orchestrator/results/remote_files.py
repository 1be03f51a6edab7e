"""Copy files from directories on one host to this machine: the receiving end of training/results/sender.py.

`HostFiles(transport, python).fetch(roots, verify=...)` runs ONE command on the host (the sender's source
as `python -S -c`, its request on stdin: nothing of tfcluster needs to be there) and writes what it
streams back under each root's local directory, keeping the remote relative paths:
- **resumable**: the request says what is already here ([size, sha256] per file, or [size, null] when not
  `verify`), so a file already here with the same size and hash is not sent again, a file that grew (a
  log) or a copy that was cut short sends only what is missing; with `verify` a file arrives in
  `<name>.tfcluster-part`, is checked against the sender's sha256 of the whole file, and only then
  renamed to its name; without `verify` (event files followed for TensorBoard, which only grow) bytes are
  appended in place;
- **inert**: a remote path that is absolute, climbs out (`..`) or ends like our partial files is refused;
  directories here are 0700 and files 0600 from their first byte.
`cancel()` (another thread: Ctrl-C, a follower stopping) closes the command, which kills it on the host.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from orchestrator.errors import HostError
from orchestrator.run.inline_source import module_source
from orchestrator.transport.base import Session, Transport, shell_command

PART = ".tfcluster-part"


@dataclass(frozen=True)
class Root:
    remote: str  # a directory on the host (absolute, or starting with ~/)
    local: Path  # where its files go here
    match: str = ""  # only files whose name contains this ("tfevents": event files)


@dataclass
class Fetched:
    """What one fetch did on one host."""

    files: int = 0  # files (or their missing ends) received
    same: int = 0  # already here, not sent again
    bytes: int = 0
    missing: list[str] = field(default_factory=list)  # remote roots that are not there
    warnings: list[str] = field(default_factory=list)


def safe_relative(rel: str) -> PurePosixPath:
    """A relative path the sender named, or ValueError when it is not one we would write."""
    path = PurePosixPath(rel)
    if not path.parts or "\0" in rel or path.is_absolute() or any(p in ("..", "") for p in path.parts) or rel.endswith(PART):
        raise ValueError(f"refused path {rel!r}")
    return path


def private_dirs(path: Path) -> None:
    """Make `path` and every missing parent 0700 (`mkdir(parents=True)` gives the parents the umask's)."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        directory.mkdir(mode=0o700, exist_ok=True)


def _hash_file(path: Path) -> Any:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest


class _Incoming:
    """One file being received: where its bytes go and what to check at its end."""

    def __init__(self, target: Path, offset: int, size: int, verify: bool, resumed: Any) -> None:
        self.target, self.offset, self.size = target, offset, size
        self.path = target.with_name(target.name + PART) if verify else target
        self.digest = (resumed.copy() if offset and resumed is not None else hashlib.sha256()) if verify else None
        private_dirs(target.parent)
        if verify and offset and target.exists():  # a complete copy that the remote file has grown past
            os.replace(target, self.path)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        self.file: IO[bytes] = os.fdopen(fd, "r+b")
        self.file.truncate(offset)
        self.file.seek(offset)
        self.received = 0

    def write(self, data: bytes) -> None:
        self.file.write(data)
        if self.digest is not None:
            self.digest.update(data)
        self.received += len(data)

    def finish(self, sha256: str | None) -> str | None:
        """Close it; returns a warning when it did not arrive whole (a verified part is then dropped)."""
        self.file.close()
        if self.received != self.size - self.offset:
            problem = f"{self.target}: {self.received} of {self.size - self.offset} bytes arrived"
        elif self.digest is not None and self.digest.hexdigest() != sha256:
            problem = f"{self.target}: sha256 differs from the host's"
        else:
            if self.path != self.target:
                os.replace(self.path, self.target)
            return None
        if self.path != self.target:
            self.path.unlink(missing_ok=True)
        return problem


class HostFiles:
    def __init__(self, transport: Transport, python: str, *, line_timeout: float = 300.0) -> None:
        self.transport = transport
        self.python = python
        self.line_timeout = line_timeout  # the sender may hash a large file before its next line
        self._session: Session | None = None
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        self._cancelled.set()
        session = self._session
        if session is not None:
            with contextlib.suppress(Exception):  # closing from another thread: the reader then ends
                session.close()

    def fetch(self, roots: list[Root], *, verify: bool) -> Fetched:
        host = self.transport.host
        have: list[dict[str, list[Any]]] = []
        resumed: list[dict[str, Any]] = []  # verify: each local file's sha256 object, to go on with
        for root in roots:
            sizes, digests = self._have(root.local, verify)
            have.append(sizes)
            resumed.append(digests)
        request = {"roots": [r.remote for r in roots], "match": [r.match for r in roots], "verify": verify,
                   "have": have}
        command = shell_command([self.python, "-S", "-c", module_source("training.results.sender")])
        if self._cancelled.is_set():
            raise HostError(host, "cancelled", "stopped")
        session = self._session = self.transport.open_session(command)
        try:
            session.send(json.dumps(request).encode() + b"\n")
            return self._receive(session, roots, resumed, verify)
        except (HostError, OSError) as exc:
            if self._cancelled.is_set():  # its session was closed under the read
                raise HostError(host, "cancelled", "stopped") from None
            if isinstance(exc, OSError):
                raise HostError(host, "error", f"cannot write here: {exc}") from None
            raise
        finally:
            self._session = None
            session.close()

    @staticmethod
    def _have(local: Path, verify: bool) -> tuple[dict[str, list[Any]], dict[str, Any]]:
        sizes: dict[str, list[Any]] = {}
        digests: dict[str, Any] = {}
        if not local.is_dir():
            return sizes, digests
        for path in sorted(p for p in local.rglob("*") if p.is_file() and not p.is_symlink()):
            rel = path.relative_to(local).as_posix()
            if rel.endswith(PART):
                rel = rel[: -len(PART)]
                if not verify or rel in sizes:
                    continue
            elif not verify:
                sizes[rel] = [path.stat().st_size, None]
                continue
            digest = _hash_file(path)
            sizes[rel] = [path.stat().st_size, digest.hexdigest()]
            digests[rel] = digest
        return sizes, digests

    def _receive(self, session: Session, roots: list[Root], resumed: list[dict[str, Any]], verify: bool) -> Fetched:
        host = self.transport.host
        result = Fetched()
        incoming: _Incoming | None = None
        try:
            while True:
                line = session.read_line(self.line_timeout)
                if line is None:
                    break
                if not line.startswith("@"):
                    if incoming is None:
                        raise HostError(host, "remote", f"file sender: data outside a file: {line[:80]!r}")
                    incoming.write(base64.b64decode(line, validate=True))
                    continue
                word, _, rest = line.partition(" ")
                if word == "@file":
                    header = json.loads(rest)
                    index = int(header["root"])
                    rel = safe_relative(str(header["path"]))
                    incoming = _Incoming(roots[index].local.joinpath(*rel.parts), int(header["offset"]),
                                         int(header["size"]), verify, resumed[index].get(rel.as_posix()))
                elif word == "@end" and incoming is not None:
                    problem = incoming.finish(json.loads(rest).get("sha256"))
                    result.files += problem is None
                    result.bytes += incoming.received
                    if problem:
                        result.warnings.append(problem)
                    incoming = None
                elif word == "@same":
                    result.same += 1
                elif word == "@missing":
                    result.missing.append(roots[int(rest)].remote)
                elif word == "@warn":
                    result.warnings.append(rest)
                elif word == "@done":
                    return result
        except (ValueError, KeyError, IndexError, binascii.Error) as exc:
            raise HostError(host, "remote", f"file sender: unreadable answer ({exc})") from None
        finally:
            if incoming is not None:
                incoming.file.close()  # a part file stays: the next fetch resumes from it
        detail = session.stderr_tail.strip()[-300:] or f"exit code {session.exit_code}"
        raise HostError(host, "lost" if session.exit_code in (None, -1) else "remote",
                        f"the file sender ended early: {detail}")
