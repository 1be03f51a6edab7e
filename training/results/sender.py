"""Send files of a run's directories to the orchestrator over a command's stdout, as lines (any transport
that carries a command's lines carries them; no SFTP, no binary channel needed). Stdlib only.

Not shipped: `pull` and `tensorboard` send this module's source to the host's own `python -S -c` (see
orchestrator/results/remote_files.py), so it also runs after the run's code is gone. It reads one JSON
line on stdin:

    {"roots": ["/abs/dir", ...], "match": ["tfevents" or "", ...], "verify": bool,
     "have": [{"rel/path": [size, sha256 or null], ...}, ...]}

A root may start with `~/` (the user's home here). `have` says, per root, what the receiver already holds. For each regular file under each root (symlinks
are not followed; a name must contain that root's `match`; TensorFlow's `checkpoint` index first, so the
checkpoint it names was complete when it was listed), the sender decides where to start:
- the receiver has more bytes than the file: from 0 (the file was replaced);
- `verify`: the receiver's bytes are a prefix of the file (same sha256 over its length): from there,
  or nothing at all when they are the whole file (`@same`); else from 0. The `@end` line carries the
  sha256 of the whole file, for the receiver to check what it assembled;
- not `verify` (event files being followed: they only grow): from the receiver's size, no hashing.

Output lines: `@missing <root index>` (no such directory), `@file {"root", "path", "offset", "size"}`,
then the bytes from `offset` to `size` as base64 lines, then `@end {"sha256"}`; `@same {"root", "path"}`;
`@warn <text>` (an unreadable file; a file that vanished while listed is skipped quietly); last
`@done {"files", "same", "bytes"}`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
from typing import IO, Any

CHUNK = 48 * 1024  # raw bytes per line: 64 KiB of base64
INDEX_FIRST = "checkpoint"


def listing(root: str, match: str) -> list[str]:
    """Relative paths of the regular files under root whose name contains `match`, index files first."""
    found = []
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        for name in files:
            path = os.path.join(directory, name)
            if match in name and not os.path.islink(path):
                found.append(os.path.relpath(path, root))
    return sorted(found, key=lambda rel: (os.path.basename(rel) != INDEX_FIRST, rel))


def prefix_hash(f: IO[bytes], length: int) -> Any:
    """sha256 over the file's first `length` bytes (a hashlib object, to go on with)."""
    digest = hashlib.sha256()
    left = length
    while left > 0:
        block = f.read(min(CHUNK * 16, left))
        if not block:
            break
        digest.update(block)
        left -= len(block)
    return digest


def send_file(out: IO[bytes], index: int, rel: str, path: str, have: list[Any] | None, verify: bool) -> int:
    """Send one file (or `@same`); returns the bytes sent, -1 for `@same`."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size  # what is sent: a file still growing is sent up to here
        have_size = int(have[0]) if have else 0
        offset = 0 if have_size > size else have_size
        digest = hashlib.sha256() if verify else None
        if verify and offset:
            digest = prefix_hash(f, offset)
            if digest.hexdigest() != have[1]:  # type: ignore[index]  # offset > 0: have is given
                offset, digest = 0, hashlib.sha256()
        if have is not None and offset == size:
            out.write(b"@same " + json.dumps({"root": index, "path": rel}).encode() + b"\n")
            return -1
        f.seek(offset)
        header = {"root": index, "path": rel, "offset": offset, "size": size}
        out.write(b"@file " + json.dumps(header).encode() + b"\n")
        left = size - offset
        while left > 0:
            block = f.read(min(CHUNK, left))
            if not block:
                break  # truncated under us: the receiver sees fewer bytes than `size` and drops it
            if digest is not None:
                digest.update(block)
            out.write(base64.b64encode(block) + b"\n")
            left -= len(block)
        end = {"sha256": digest.hexdigest() if digest is not None else None}
        out.write(b"@end " + json.dumps(end).encode() + b"\n")
        return size - offset - left


def main() -> int:
    request = json.loads(sys.stdin.readline())
    out = sys.stdout.buffer
    verify = bool(request.get("verify"))
    files = same = sent = 0
    for index, remote in enumerate(request["roots"]):
        root = os.path.expanduser(remote)
        if not os.path.isdir(root):
            out.write(f"@missing {index}\n".encode())
            continue
        have = request["have"][index] if index < len(request.get("have", [])) else {}
        for rel in listing(root, request["match"][index]):
            path = os.path.join(root, rel)
            try:
                n = send_file(out, index, rel, path, have.get(rel), verify)
            except FileNotFoundError:
                continue  # gone since it was listed (a checkpoint rotated away, a temp file renamed)
            except OSError as exc:
                out.write(f"@warn {path}: {exc.strerror or exc}\n".encode())
                continue
            if n < 0:
                same += 1
            else:
                files += 1
                sent += n
    out.write(b"@done " + json.dumps({"files": files, "same": same, "bytes": sent}).encode() + b"\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
